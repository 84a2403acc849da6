"""The embedded store's transactions, on SQLAlchemy's synchronous SQLite engine.

Every SQLite call already runs on the event loop's own thread (:mod:`.sqlite_inline`), so the
asyncio layer SQLAlchemy puts over the driver does no I/O of its own: each call goes through a
greenlet switch, the async pool and the driver adapter and comes straight back. Measured alone
(one no-op transaction at a time, a slow two-core machine), that layer was most of a
transaction's cost: an empty ``BEGIN IMMEDIATE``/``COMMIT`` took 316-443 us through the async
engine against 94-164 us through the synchronous one, one with a single ``SELECT`` 505-699 us
against 221-258 us, where SQLite itself spends ~30 us. So :class:`SyncPool` lends the store
connections of a synchronous engine, behind the same :class:`~.connection.Connection` protocol the
asynchronous ones meet: the store's statements are the same objects, and its errors are
SQLAlchemy's, wrapped as before. From a statement's second run :class:`SyncConnection` sends its
plan (:mod:`.plans`: compiled by SQLAlchemy once) on the sqlite3 connection itself, stepping over
SQLAlchemy's synchronous execution too (~20 % of the store's calls for a no-op).

What this asks, and why it holds:

- **A transaction never waits for the write lock on the loop's thread.** The writer opens with
  ``BEGIN IMMEDIATE`` on a connection whose busy timeout is zero: while another thread or
  process (the heartbeat thread's store, a second ``tether`` command) holds the lock, the begin
  fails at once and is retried after an ``asyncio`` sleep, so the loop serves everyone else
  meanwhile, for up to :data:`LOCK_WAIT_S`. Once the lock is held, no statement of the
  transaction can wait for one. Readers (WAL) take no lock.
- **One coroutine at a time per connection.** Connections are lent through a semaphore, as the
  asynchronous pool did (up to :data:`POOL_WAIT_S`). A body whose statements all run inline
  never yields to the loop anyway.
- **WAL, set on every new connection.** Each connection's pragmas run as it is made
  (:func:`sync_engine`'s creator, reconnects included), and a database not in WAL mode is
  refused: a rollback journal's ``COMMIT`` would need every reader gone, at a busy timeout of
  zero. The writer's checkpoints run beside it (:mod:`.sqlite_checkpoints`).
- **Rows are read when the statement runs** (:class:`BufferedCursor`), as the asynchronous
  driver adapter did, so no statement is left in progress at ``COMMIT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import (
    CoreExecuteOptionsParameter,
    _CoreAnyExecuteParams,
)

from tether.store import plans
from tether.store.connection import ScalarOfExecute
from tether.store.errors import StoreUnavailable
from tether.store.sqlite_checkpoints import Checkpoints
from tether.store.sqlite_inline import BUSY_TIMEOUT_S

log = logging.getLogger(__name__)

LOCK_WAIT_S = BUSY_TIMEOUT_S
"""How long a writer waits for another thread's or process's write lock before failing."""
POOL_WAIT_S = 60.0
"""How long a transaction waits for a connection of its pool before failing."""
FIRST_RETRY_S = 0.001
LAST_RETRY_S = 0.05
GATHER_TURNS = 3
"""Loop turns a group commit of accepts or finishes lets pass before it takes its batch
(:class:`tether.groupcommit.GroupCommit`), since these transactions hold the loop's thread:
nothing arrives while one runs, so without them a batch held what one turn brought. A batch's
transaction costs much the same whatever its size (a no-op's store calls, accept to status read:
0.29 ms of CPU in batches of 13, 0.23 ms in batches of 32). In ``tether dev``, bursts of 2,000
background no-ops, alternating: batches of accepts ~13 -> ~22, of finishes ~13 -> ~30, and
0.64 (0.62-0.65) against 0.69 (0.62-0.72) ms of CPU per invocation; 2, 4 and 6 turns did no
better, and claims and event appends gained nothing from turns of their own (a claim takes the
tokens and freed slots at hand, an append the events an attempt buffered)."""


class BufferedCursor(sqlite3.Cursor):
    """A cursor that reads every row of a statement as the statement runs."""

    _rows: deque[Any] | None = None

    def execute(self, sql: str, parameters: Any = (), /) -> BufferedCursor:
        super().execute(sql, parameters)
        self._rows = deque(super().fetchall()) if self.description else None
        return self

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> BufferedCursor:
        super().executemany(sql, seq_of_parameters)
        self._rows = None
        return self

    def fetchone(self) -> Any:
        return self._rows.popleft() if self._rows else None

    def fetchmany(self, size: int | None = None) -> list[Any]:
        count = self.arraysize if size is None else size
        rows = self._rows or deque()
        return [rows.popleft() for _ in range(min(count, len(rows)))]

    def fetchall(self) -> list[Any]:
        rows, self._rows = list(self._rows or ()), None
        return rows


class BufferedConnection(sqlite3.Connection):
    def cursor(self, factory: Any = BufferedCursor) -> Any:
        return super().cursor(factory)


def sync_engine(
    path: str, *, writer: bool, size: int, pragmas: Iterable[str], **options: Any
) -> sa.Engine:
    """``size`` connections to the file at ``path``, in the driver's autocommit mode (the pool
    begins every transaction itself), each running ``pragmas`` first (reconnects too). A writer's
    connections fail at once on a held lock. ``options``: more ``create_engine`` arguments (the
    JSON serializer, hidden parameters)."""
    pragmas = tuple(pragmas)

    def connect() -> sqlite3.Connection:
        timeout = 0.0 if writer else BUSY_TIMEOUT_S
        connection = sqlite3.connect(
            path, timeout=timeout, check_same_thread=False, factory=BufferedConnection
        )
        connection.isolation_level = None
        try:
            run_pragmas(connection, pragmas)
        except BaseException:
            connection.close()  # SQLAlchemy wraps the error and never hands this one out
            raise
        return connection

    return sa.create_engine(
        f"sqlite:///{path}",
        creator=connect,
        poolclass=sa.pool.QueuePool,
        pool_size=size,
        max_overflow=0,
        pool_timeout=0,  # never waited on: a pool's semaphore lends no more than it holds
        **options,
    )


def run_pragmas(dbapi_connection: Any, pragmas: Iterable[str]) -> None:
    """Run ``pragmas`` on a new driver connection (``sqlite3``'s, or SQLAlchemy's adapter of
    it); a database the journal-mode pragma leaves outside WAL is refused: a rollback
    journal's ``COMMIT`` would need every reader gone, at the writer's busy timeout of zero."""
    cursor = dbapi_connection.cursor()
    try:
        for pragma in pragmas:
            cursor.execute(pragma)
            row = cursor.fetchone()
            if pragma.startswith("PRAGMA journal_mode") and (row is None or row[0] != "wal"):
                raise sqlite3.OperationalError(f"the database is not in WAL mode ({row})")
    finally:
        cursor.close()


class SyncConnection(ScalarOfExecute):
    """A synchronous connection behind the store's :class:`~.connection.Connection` protocol."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    async def execute(
        self,
        statement: sa.Executable,
        parameters: _CoreAnyExecuteParams | None = None,
        *,
        execution_options: CoreExecuteOptionsParameter | None = None,
    ) -> Any:
        """The statement's plan on sqlite3 (:mod:`.plans`), or SQLAlchemy's own execution where
        it has none, options are given, or something listens to the engine's statements."""
        conn = self._conn
        plan = plans.runnable(
            statement,
            parameters,
            conn.dialect,
            sqlalchemy_only=bool(execution_options)
            or bool(conn.engine.dispatch.before_cursor_execute),
        )
        if plan is None:
            return conn.execute(statement, parameters, execution_options=execution_options)
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        cursor: Any = dbapi.cursor()
        try:
            if parameters is None or isinstance(parameters, Mapping):
                cursor.execute(plan.sql, plan.params(parameters))
            else:
                cursor.executemany(plan.sql, [plan.params(p) for p in parameters])
            description = cursor.description
            if description:
                rows = plan.rows(lambda: description, cursor.fetchall(), conn.dialect)
            else:
                rows = []
            count = cursor.rowcount
        except sqlite3.Error as exc:
            raise sa.exc.DBAPIError.instance(
                plan.sql, None, exc, sqlite3.Error, hide_parameters=True
            ) from None
        finally:
            cursor.close()
        return plans.Rows(plan.keys, rows, count)


class SyncPool:
    """Connections of a synchronous engine, lent one transaction at a time.

    ``engine``: from :func:`sync_engine`, as many connections lent at once as its pool holds;
    ``begin``: the statement that opens each transaction (``BEGIN IMMEDIATE`` for the writer,
    ``BEGIN`` for a reader); ``checkpoints``: the writer's (:mod:`.sqlite_checkpoints`), told of
    every commit.
    """

    def __init__(self, engine: sa.Engine, *, begin: str, checkpoints: Checkpoints | None = None):
        self.engine = engine
        self._begin = begin
        self._checkpoints = checkpoints
        self._restart: asyncio.Task[None] | None = None
        self._idle: list[sa.Connection] = []
        assert isinstance(engine.pool, sa.pool.QueuePool)
        self._slots = asyncio.Semaphore(engine.pool.size())
        self._closed = False

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[SyncConnection]:
        """One transaction, committed when the block ends, rolled back if it raises."""
        async with self._slot():
            conn = self._idle.pop() if self._idle else self.engine.connect()
            try:
                await self._open(conn)
            except asyncio.CancelledError:  # while waiting for the lock: nothing was begun
                self._give_back(conn)
                raise
            except BaseException:
                self._discard(conn)
                raise
            try:
                yield SyncConnection(conn)
            except BaseException:
                with self._discarding(conn):
                    _end(conn, commit=False)
                self._give_back(conn)
                raise
            with self._discarding(conn):
                _end(conn, commit=True)
            self._give_back(conn)
            if self._checkpoints is not None and self._checkpoints.committed():
                self._restart = asyncio.create_task(self._restart_wal())

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of the pool's connections to lend, waited for up to :data:`POOL_WAIT_S`."""
        if self._slots.locked():  # else the acquire below takes a slot at once
            try:
                async with asyncio.timeout(POOL_WAIT_S):
                    await self._slots.acquire()
            except TimeoutError:
                raise StoreUnavailable("no connection of the embedded store came free") from None
        else:
            await self._slots.acquire()
        try:
            yield
        finally:
            self._slots.release()

    async def _restart_wal(self) -> None:
        """The writer's WAL starts over while none of this pool's transactions holds the write
        lock (:mod:`.sqlite_checkpoints`)."""
        assert self._checkpoints is not None
        try:
            await self._checkpoints.restart(self._slot)
        except StoreUnavailable:  # every connection stayed lent: the next commit asks again
            log.info("the embedded store's WAL was not restarted: the writer stayed busy")

    @contextlib.contextmanager
    def _discarding(self, conn: sa.Connection) -> Iterator[None]:
        """A connection whose begin, commit or rollback failed is in an unknown state: closed,
        and a new one replaces it."""
        try:
            yield
        except BaseException:
            self._discard(conn)
            raise

    @staticmethod
    def _discard(conn: sa.Connection) -> None:
        conn.invalidate()
        conn.close()

    def _give_back(self, conn: sa.Connection) -> None:
        if self._closed:  # lent when the pool closed: its transaction ended, now it closes
            conn.close()
        else:
            self._idle.append(conn)

    def close(self) -> None:
        """Close the idle connections now, the lent ones as their transactions end."""
        self._closed = True
        if self._restart is not None:
            self._restart.cancel()
        for conn in self._idle:
            conn.close()
        self._idle.clear()
        self.engine.dispose()

    async def _open(self, conn: sa.Connection) -> None:
        """``BEGIN`` on the driver's connection; a held write lock is waited for by sleeping."""
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        deadline = time.monotonic() + LOCK_WAIT_S
        pause = FIRST_RETRY_S
        while True:
            try:
                dbapi.execute(self._begin)
                return
            except sqlite3.Error as exc:
                if not _busy(exc) or time.monotonic() > deadline:
                    raise sa.exc.DBAPIError.instance(
                        self._begin, None, exc, sqlite3.Error
                    ) from None
            await asyncio.sleep(pause)
            pause = min(pause * 2, LAST_RETRY_S)


@dataclass(frozen=True, slots=True)
class SyncPools:
    """The embedded store's one writer, its readers, and the writer's checkpoints."""

    writer: SyncPool
    reader: SyncPool
    checkpoints: Checkpoints

    def close(self) -> None:
        self.writer.close()
        self.reader.close()
        self.checkpoints.close()


def _busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _end(conn: sa.Connection, *, commit: bool) -> None:
    """Commit or roll back the driver's transaction, and SQLAlchemy's view of it."""
    if conn.in_transaction():
        if commit:
            conn.commit()
        else:
            conn.rollback()
    dbapi = conn.connection.dbapi_connection
    if dbapi is not None and dbapi.in_transaction:  # a block that ran no statement
        if commit:
            dbapi.commit()
        else:
            dbapi.rollback()
