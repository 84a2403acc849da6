"""Engines for PostgreSQL (psycopg 3; each connection lent as a
:class:`.pg_direct.DirectConnection`, whose statements skip SQLAlchemy's asyncio layer) and the
embedded SQLite (aiosqlite for migrations, the synchronous pools of :mod:`.sqlite_sync` for
everything else), and the one way the store opens a connection: with the driver's errors
wrapped (:mod:`tether.store.errors`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from tether.jsonvalue import dumps
from tether.store.connection import Connection
from tether.store.dialect import Dialect, dialect_named
from tether.store.errors import StoreUnavailable, store_error, wrapped
from tether.store.pg_direct import DirectConnection
from tether.store.sqlite_sync import GATHER_TURNS, SyncPools

ENGINE_OPTIONS = {"json_serializer": dumps, "hide_parameters": True}
"""Every engine's: ``hide_parameters``, since on a database error SQLAlchemy would otherwise log
and raise the bound parameters of the whole statement, which for a group commit are other users'
inputs."""


def create_engine(url: str | sa.URL, *, pool_size: int = 10) -> AsyncEngine:
    parsed = sa.make_url(url)
    dialect = dialect_named(parsed.get_backend_name())
    engine = create_async_engine(
        parsed, **ENGINE_OPTIONS, **dialect.engine_options(parsed, pool_size)
    )
    dialect.prepare(engine)
    return engine


def create_reader(url: str | sa.URL, *, pool_size: int = 10) -> AsyncEngine | None:
    """Connections for reads beside the writer's, where the database gains by them. SQLite has
    one writer (``BEGIN IMMEDIATE``), and a read on the writer's connection waits behind every
    write queued there; in WAL mode a read transaction of its own sees every commit and blocks
    none. PostgreSQL's reads autocommit: one round trip each, not three."""
    parsed = sa.make_url(url)
    dialect = dialect_named(parsed.get_backend_name())
    options = dialect.reader_options(parsed, pool_size)
    if options is None:
        return None
    engine = create_async_engine(parsed, **ENGINE_OPTIONS, **options)
    dialect.prepare_reader(engine)
    return engine


@dataclass(frozen=True, slots=True)
class Database:
    """An engine and its dialect: what every part of the store queries through."""

    engine: AsyncEngine
    dialect: Dialect
    reader: AsyncEngine | None = None
    """Where :meth:`connection` reads, if not on ``engine`` (:func:`create_reader`)."""
    sync: SyncPools | None = None
    """Where transactions and reads run instead of the engines, where the dialect has them:
    the embedded store's (:mod:`.sqlite_sync`). The engines then serve migrations only."""
    deadline: float = 0.0
    """Seconds one checkout of the engines may last, the wait for its connection included
    (``timers.store_deadline``; 0: none): past it, its connection is given up and the work
    fails with :class:`.errors.StoreUnavailable` (:meth:`_lent`). The embedded store's run on
    the loop's thread and have none."""

    @classmethod
    def of(
        cls, engine: AsyncEngine, reader: AsyncEngine | None = None, *, deadline: float = 0.0
    ) -> Database:
        dialect = dialect_named(engine.dialect.name)
        sync = dialect.sync_pools(engine.url, **ENGINE_OPTIONS)
        return cls(engine, dialect, reader, sync, deadline)

    @property
    def gather_turns(self) -> int:
        """Loop turns a group commit of writes lets pass before it takes its batch: the embedded
        store's transactions hold the loop's thread (:data:`.sqlite_sync.GATHER_TURNS`);
        PostgreSQL's wait on the network, and what arrives meanwhile joins the next batch."""
        return GATHER_TURNS if self.sync is not None else 0

    @property
    def statement_engines(self) -> list[sa.Engine]:
        """The synchronous engines the store's statements go through (to listen to their
        events): the asynchronous engines' own, or the embedded store's pools'."""
        if self.sync is not None:
            return [self.sync.writer.engine, self.sync.reader.engine]
        return [e.sync_engine for e in (self.engine, self.reader) if e is not None]

    def close_sync(self) -> None:
        if self.sync is not None:
            self.sync.close()

    @property
    def now(self) -> sa.ColumnElement[float]:
        return self.dialect.now

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """One transaction, committed when the block ends, rolled back if it raises."""
        with wrapped():
            if self.sync is not None:
                async with self.sync.writer.transaction() as sync_conn:
                    yield sync_conn
                return
            async with self._lent(self.engine) as direct:
                try:
                    yield direct
                except BaseException:
                    await direct.end(commit=False)
                    raise
                await direct.end(commit=True)

    @contextlib.asynccontextmanager
    async def autocommit(self) -> AsyncIterator[Connection]:
        """Each statement commits on its own: one round trip on PostgreSQL instead of three
        (``BEGIN``, the statement, ``COMMIT``), for writes that one statement makes whole. SQLite
        (one writer) gets one transaction."""
        if not self.dialect.autocommits:
            async with self.transaction() as conn:
                yield conn
            return
        with wrapped():
            async with self._lent(self.engine, isolation_level="AUTOCOMMIT") as direct:
                yield direct

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A connection for reads: the reader's where there is one (it writes nothing)."""
        with wrapped():
            if self.sync is not None:
                async with self.sync.reader.transaction() as sync_conn:
                    yield sync_conn
                return
            async with self._lent(self.reader or self.engine) as direct:
                yield direct

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[Connection]:
        """A connection whose reads all see one moment: PostgreSQL's ``REPEATABLE READ``, read
        only (on the writer's pool: its reader's connections stay in autocommit); the embedded
        store's reader transaction already is one (WAL)."""
        if self.sync is not None:
            async with self.connection() as conn:
                yield conn
            return
        with wrapped():
            async with self._lent(
                self.engine, isolation_level="REPEATABLE READ", postgresql_readonly=True
            ) as direct:
                yield direct

    @contextlib.asynccontextmanager
    async def _lent(self, engine: AsyncEngine, **options: Any) -> AsyncIterator[DirectConnection]:
        """A connection of ``engine``'s pool with the execution ``options``, for as long as
        :attr:`deadline` allows. The wait for it is cancelled at the deadline (no statement
        runs yet but an idle connection's ping, which has a shorter guard of its own:
        :mod:`.idleping`); a statement on it is not (:meth:`.DirectConnection.expire`)."""
        if not self.deadline:
            async with engine.connect() as conn:
                if options:
                    await conn.execution_options(**options)
                yield DirectConnection(conn)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + self.deadline
        async with contextlib.AsyncExitStack() as stack:
            try:
                async with asyncio.timeout_at(due):
                    conn = await stack.enter_async_context(engine.connect())
                    if options:
                        await conn.execution_options(**options)
                    driver = (await conn.get_raw_connection()).driver_connection
            except TimeoutError:
                raise self._late("no connection") from None
            direct = DirectConnection(conn, driver)
            expiry = loop.call_at(due, direct.expire)
            try:
                yield direct
            except Exception as exc:
                if direct.expired and store_error(exc) is not None:
                    raise self._late("no answer") from None
                raise
            finally:
                expiry.cancel()

    def _late(self, what: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"{what} from PostgreSQL within {self.deadline:g} s (timers.store_deadline)"
        )
