"""Everything that differs between PostgreSQL and the embedded SQLite, in one place.

The queries are written once, against :class:`Dialect`; nothing else in the store asks which
database it runs on.
"""

from __future__ import annotations

import contextlib
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from tether.jsonvalue import loads_as_stored
from tether.store.bound import Carriage
from tether.store.connection import Connection
from tether.store.idleping import ping_when_idle
from tether.store.schema import invocations
from tether.store.sqlite_checkpoints import NO_AUTOCHECKPOINT, Checkpoints
from tether.store.sqlite_inline import inline_creator
from tether.store.sqlite_sync import SyncPool, SyncPools, run_pragmas, sync_engine

inv = invocations.c
SQLITE_READERS = 2
"""Read connections of the embedded store beside its one writer."""
MIGRATION_LOCK_KEY = 0x7E7E_0001
CLAIM_LOCK_KEY = 0x7E7E_0002
ANALYZE_LOCK_KEY = 0x7E7E_0003
"""The transaction advisory lock under which one process at a time analyzes the invocations
(:mod:`tether.store.planner_statistics`)."""

_HELD_ROWS = (
    sa.select(inv.id)
    .where(inv.id == sa.any_(sa.cast(sa.bindparam("ids"), postgresql.ARRAY(sa.Text))))
    .with_for_update(skip_locked=True)
)
"""PostgreSQL's rows of ``:ids`` no other transaction holds, locked: one text for any number of
ids (an ``IN`` list is a text per count, parsed and planned anew)."""


class Dialect(ABC):
    name: str
    autocommits: bool = False
    """Whether a connection may commit each statement on its own (``Database.autocommit``)."""
    lateral: bool
    """Whether it runs ``JOIN LATERAL`` (the claim's per-tenant probes in one plan)."""
    writes_in_with: bool = False
    """Whether a statement's ``WITH`` may hold writes (``INSERT … RETURNING`` as a CTE): two
    writes in one round trip."""
    carriage: Carriage
    """How a batch's rows are taken apart (:class:`.bound.BoundBatch`)."""
    probes_listed_tenants: bool = False
    """Whether a claim from a process's tenant list reads only the listed tenants that still
    have queued work, one index probe each (:func:`.candidates.known_tenants`)."""
    now: sa.ColumnElement[float]
    """The database clock, in seconds since the epoch: every timestamp and staleness is judged
    on it, never on a worker's clock."""

    @abstractmethod
    def json_texts(self, param: str) -> str:
        """SQL for the strings of the JSON array bound to ``:param``, one row each (a list of
        any length as one parameter, in text SQL)."""

    @abstractmethod
    def engine_options(self, url: sa.URL, pool_size: int) -> dict[str, Any]:
        """Keyword arguments for ``create_async_engine`` of ``url``."""

    @abstractmethod
    def prepare(self, engine: AsyncEngine) -> None:
        """Set up each new connection of ``engine``."""

    def reader_options(self, url: sa.URL, pool_size: int) -> dict[str, Any] | None:
        """``create_async_engine`` arguments for an engine of reads only; None: reads share
        the writer's pool."""
        return None

    def sync_pools(self, url: sa.URL, **options: Any) -> SyncPools | None:
        """Where the store's transactions run instead of ``url``'s asynchronous engines, if
        anywhere (:mod:`.sqlite_sync`); ``options``: the engines' ``create_engine`` arguments."""
        return None

    def prepare_reader(self, engine: AsyncEngine) -> None:
        """Set up each new connection of a reader engine."""
        raise NotImplementedError(f"{self.name} has no reader engine")

    @abstractmethod
    def insert_new(self, table: sa.Table, *key: str) -> Any:
        """``INSERT … ON CONFLICT (key) DO NOTHING``: a row whose key exists is skipped."""

    @abstractmethod
    def upsert(self, table: sa.Table) -> Any:
        """``INSERT`` that takes ``.on_conflict_do_update(...)``."""

    @abstractmethod
    def whole(self, value: sa.ColumnElement[float]) -> sa.ColumnElement[int]:
        """The largest whole number at most ``value`` (``value`` >= 0), as a ``bigint``."""

    def upsert_on(self, table: sa.Table, key: str) -> Any:
        """``INSERT … ON CONFLICT (key) DO UPDATE`` every other column to the new value; the rows
        are the execute's parameters, so the statement compiles once whatever their number."""
        insert = self.upsert(table)
        others = {c.name: insert.excluded[c.name] for c in table.c if c.name != key}
        return insert.on_conflict_do_update(index_elements=[key], set_=others)

    @abstractmethod
    async def held_rows(self, conn: Connection, invocation_ids: Sequence[str]) -> frozenset[str]:
        """Lock the rows nobody else holds, without waiting; the ids another transaction holds
        (or that do not exist), to be written later, alone."""

    @abstractmethod
    async def lock_migrations(self, conn: Connection) -> None:
        """Make concurrent migration runs (replicas starting at once) take turns."""

    @abstractmethod
    async def begin_claim(self, conn: Connection, *, serialize: bool) -> None:
        """Set up a claim transaction; ``serialize``: make claims take turns across every
        process and host until it ends (the serialization point that keeps running attempts
        within their caps)."""


class PostgreSQL(Dialect):
    name = "postgresql"
    lateral = True
    carriage = Carriage.JSONB
    writes_in_with = True
    now = sa.literal_column("extract(epoch from clock_timestamp())::double precision", sa.Float)
    autocommits = True

    def json_texts(self, param: str) -> str:
        return f"SELECT jsonb_array_elements_text(CAST(:{param} AS jsonb))"

    def engine_options(self, url: sa.URL, pool_size: int) -> dict[str, Any]:
        return {
            "pool_size": pool_size,
            "max_overflow": pool_size,
            "pool_recycle": 300,
        }

    def prepare(self, engine: AsyncEngine) -> None:
        # psycopg's defaults (the worker adds its own options to the URL); a ping only for a
        # connection that sat idle, not before every transaction (``pool_pre_ping``)
        ping_when_idle(engine)

    def reader_options(self, url: sa.URL, pool_size: int) -> dict[str, Any] | None:
        """Reads on connections of their own, in autocommit: a read is its one statement, where
        on the writer's connections psycopg wrapped it in ``BEGIN`` and the pool's
        ``ROLLBACK``, three round trips for one (each statement of a ``READ COMMITTED``
        transaction sees its own snapshot anyway). Connections kept in autocommit for good,
        not switched into it and back per read: that was tried and cost the worker more than
        it saved; and a worker keeps its reads off this pool too (:meth:`Store.postgres`,
        ``separate_reads``). Half the writer's pool: a read holds its connection for one round
        trip."""
        size = max(1, pool_size // 2)
        return {**self.engine_options(url, size), "isolation_level": "AUTOCOMMIT"}

    def prepare_reader(self, engine: AsyncEngine) -> None:
        ping_when_idle(engine)

    def insert_new(self, table: sa.Table, *key: str) -> Any:
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=list(key))

    def upsert(self, table: sa.Table) -> Any:
        return postgresql.insert(table)

    def whole(self, value: sa.ColumnElement[float]) -> sa.ColumnElement[int]:
        return sa.cast(sa.func.floor(value), sa.BigInteger)  # a cast alone rounds

    async def held_rows(self, conn: Connection, invocation_ids: Sequence[str]) -> frozenset[str]:
        """``SKIP LOCKED``: a grouped write never waits for a lock while holding others, so it
        cannot deadlock with the heartbeat, which updates the same rows in another order."""
        locked = await conn.execute(_HELD_ROWS, {"ids": list(invocation_ids)})
        return frozenset(invocation_ids) - {row.id for row in locked}

    async def lock_migrations(self, conn: Connection) -> None:
        await conn.execute(sa.text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"))

    async def begin_claim(self, conn: Connection, *, serialize: bool) -> None:
        """No JIT for the claim's statements: at a large backlog the planner prices the heads'
        join past ``jit_above_cost`` and compiling it took 12-100 ms, for a 0.2 ms query (worker
        connections turn JIT off for good; this covers any other store that claims)."""
        if serialize:
            jit_off = "set_config('jit', 'off', true)"
            await conn.execute(
                sa.text(f"SELECT {jit_off}, pg_advisory_xact_lock({CLAIM_LOCK_KEY})")
            )


class SQLite(Dialect):
    """One connection, WAL, and ``BEGIN IMMEDIATE`` so writers queue instead of failing: a
    transaction holds the whole database, so no row is ever held by another."""

    name = "sqlite"
    lateral = False
    probes_listed_tenants = True  # in-process: ~1 us a probe, against rounds of the heads
    carriage = (
        Carriage.SQLITE_JSON if sqlite3.sqlite_version_info >= (3, 38) else Carriage.SQLITE_TEXT
    )
    now = sa.literal_column("((julianday('now') - 2440587.5) * 86400.0)", sa.Float)

    def json_texts(self, param: str) -> str:
        return f"SELECT value FROM json_each(:{param})"

    def engine_options(self, url: sa.URL, pool_size: int) -> dict[str, Any]:
        return _sqlite_pool(url, 1)

    def prepare(self, engine: AsyncEngine) -> None:
        _on_sqlite_connections(engine, WRITER_PRAGMAS, begin=WRITER_BEGIN)

    def reader_options(self, url: sa.URL, pool_size: int) -> dict[str, Any] | None:
        return _sqlite_pool(url, SQLITE_READERS)

    def prepare_reader(self, engine: AsyncEngine) -> None:
        _on_sqlite_connections(engine, READER_PRAGMAS, begin=READER_BEGIN)

    def sync_pools(self, url: sa.URL, **options: Any) -> SyncPools | None:
        path = _sqlite_file(url)
        options = {**options, "json_deserializer": loads_as_stored}  # numbers as jsonb's
        # the writer's checkpoints run on a thread of their own (sqlite_checkpoints)
        pragmas = (*WRITER_PRAGMAS, NO_AUTOCHECKPOINT)
        writer = sync_engine(path, writer=True, size=1, pragmas=pragmas, **options)
        reader = sync_engine(
            path, writer=False, size=SQLITE_READERS, pragmas=READER_PRAGMAS, **options
        )
        checkpoints = Checkpoints(path)
        return SyncPools(
            SyncPool(writer, begin=WRITER_BEGIN, checkpoints=checkpoints),
            SyncPool(reader, begin=READER_BEGIN),
            checkpoints,
        )

    def insert_new(self, table: sa.Table, *key: str) -> Any:
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=list(key))

    def upsert(self, table: sa.Table) -> Any:
        return sqlite.insert(table)

    def whole(self, value: sa.ColumnElement[float]) -> sa.ColumnElement[int]:
        return sa.cast(value, sa.Integer)  # truncates (floor() needs SQLite's math functions)

    async def held_rows(self, conn: Connection, invocation_ids: Sequence[str]) -> frozenset[str]:
        return frozenset()

    async def lock_migrations(self, conn: Connection) -> None:
        return None  # BEGIN IMMEDIATE: a migration's transaction already holds the database

    async def begin_claim(self, conn: Connection, *, serialize: bool) -> None:
        return None  # BEGIN IMMEDIATE: the one writer


NEW_FILE_PAGE_SIZE = "PRAGMA page_size=2048"
"""The page size of a database file the store creates (SQLite's default: 4,096 bytes). A file
that exists keeps its own: SQLite ignores the pragma once the file has pages, and in WAL mode
for good. Every commit writes each page it changed to the WAL whole, and a no-op's rows change
one small entry on many pages (the invocation's id and its events' keys are random, so each
lands on a page of its own): in batches of 13, at 4,096 bytes 33 KB of WAL per no-op, at 2,048
20 KB, and 10-14 % less CPU for its store calls; in batches of 30 (what tether dev's gathered
batches hold) 27 against 17 KB and 6 % less CPU (``bench embedded``). 1,024 writes less still but
costs the same CPU, and pages this small leave larger rows on overflow pages
(docs/architecture.md, the embedded store)."""
WRITER_PRAGMAS = (NEW_FILE_PAGE_SIZE, "PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL")
WRITER_BEGIN = "BEGIN IMMEDIATE"  # the one writer
# WAL as the writer left it (or set here: a reader may be first to open a new file); then
# nothing a reader's connection runs writes
READER_PRAGMAS = (NEW_FILE_PAGE_SIZE, "PRAGMA journal_mode=WAL", "PRAGMA query_only=1")
READER_BEGIN = "BEGIN"  # deferred: a read transaction, holding no lock


def _sqlite_file(url: sa.URL) -> str:
    if url.database is None:
        raise ValueError("an embedded store needs a file (':memory:' makes a throwaway one)")
    return url.database


def _sqlite_pool(url: sa.URL, size: int) -> dict[str, Any]:
    """``size`` connections to the file of ``url``, each running its calls on the event loop's
    thread (:mod:`tether.store.sqlite_inline`: the busy timeout is set there)."""
    return {
        "pool_size": size,
        "max_overflow": 0,
        "pool_timeout": 60,
        "async_creator": inline_creator(_sqlite_file(url)),
    }


def _on_sqlite_connections(engine: AsyncEngine, pragmas: Sequence[str], *, begin: str) -> None:
    """Each new connection of ``engine`` runs ``pragmas`` in the driver's autocommit mode, and
    every transaction SQLAlchemy begins on it opens with ``begin``."""

    @sa.event.listens_for(engine.sync_engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        run_pragmas(dbapi_connection, pragmas)

    @sa.event.listens_for(engine.sync_engine, "begin")
    def on_begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)


DIALECTS: dict[str, Dialect] = {d.name: d for d in (PostgreSQL(), SQLite())}


_BEFORE_ARROWS = SQLite()
_BEFORE_ARROWS.carriage = Carriage.SQLITE_TEXT


@contextlib.contextmanager
def sqlite_before_arrows() -> Iterator[None]:
    """Stores opened within take batches apart as on a SQLite older than 3.38, which has no
    ``->`` (:attr:`.bound.Carriage.SQLITE_TEXT`), whatever this one's version: for the tests
    of that path and the benchmark's baseline. A store takes its dialect as it opens, so
    only what opens a store meanwhile is affected (not a store's :meth:`~.store.Store.sibling`
    opened later); not for use while another task or thread opens one."""
    name = _BEFORE_ARROWS.name
    newer, DIALECTS[name] = DIALECTS[name], _BEFORE_ARROWS
    try:
        yield
    finally:
        DIALECTS[name] = newer


def dialect_named(name: str) -> Dialect:
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"unsupported database: {name} (PostgreSQL or SQLite)") from None
