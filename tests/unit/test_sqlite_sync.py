"""The embedded store's transactions on SQLAlchemy's synchronous engine: a held write lock is
waited for without holding the event loop, a failed body rolls back and keeps its connection,
rows outlive the statement, and every wait ends in StoreUnavailable, not a hang."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tether.store import sqlite_sync
from tether.store.engine import Database, create_engine
from tether.store.errors import StoreError, StoreUnavailable, ValueRefused, store_error
from tether.store.schema import NewInvocation, invocations
from tether.store.sqlite_sync import SyncConnection
from tether.store.store import Store

FILE = "tether.db"
"""The file of the unit tests' ``store`` fixture (tests/unit/conftest.py)."""


def new(owner: str = "ann") -> NewInvocation:
    return NewInvocation(str(uuid.uuid4()), owner, None, {}, "h")


def hold_write_lock(path: str, held: threading.Event, release: threading.Event) -> None:
    """Another thread's store holds BEGIN IMMEDIATE until ``release``."""

    async def hold() -> None:
        other = Store.embedded(path)
        try:
            async with other.db.transaction() as conn:
                await conn.execute(sa.text("SELECT 1"))
                held.set()
                await asyncio.to_thread(release.wait, 10)
        finally:
            await other.close()

    asyncio.run(hold())


@contextlib.asynccontextmanager
async def write_lock_held(path: Path) -> AsyncIterator[threading.Event]:
    """Another thread holds the write lock on ``path`` until the yielded event is set (or the
    block ends)."""
    held, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=hold_write_lock, args=(str(path), held, release))
    thread.start()
    try:
        assert await asyncio.to_thread(held.wait, 5)
        yield release
    finally:
        release.set()
        await asyncio.to_thread(thread.join, 10)


async def test_transactions_and_reads_run_on_the_synchronous_pools(store: Store) -> None:
    assert store.db.sync is not None
    async with store.db.transaction() as conn:
        assert isinstance(conn, SyncConnection)
    async with store.db.connection() as conn:
        assert isinstance(conn, SyncConnection)


async def test_a_held_write_lock_is_waited_for_while_the_loop_serves_others(
    store: Store, tmp_path: Path
) -> None:
    async with write_lock_held(tmp_path / FILE) as release:
        accepting = asyncio.create_task(store.accept(new()))
        ticks = 0
        while ticks < 20:  # the loop runs other work while the accept waits for the lock
            await asyncio.sleep(0.01)
            ticks += 1
            assert not accepting.done()
        release.set()
        accepted = await asyncio.wait_for(accepting, 10)
        assert accepted.created
        assert await store.get(accepted.invocation.id) is not None


async def test_a_lock_held_past_the_wait_fails_as_unavailable(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_sync, "LOCK_WAIT_S", 0.2)
    async with write_lock_held(tmp_path / FILE):
        with pytest.raises(StoreUnavailable):
            await store.accept(new())
    accepted = await store.accept(new())  # the writer's connection still serves
    assert accepted.created


async def test_a_failed_body_rolls_back_and_its_connection_serves_on(store: Store) -> None:
    assert store.db.sync is not None
    invocation = new()
    with pytest.raises(RuntimeError):
        async with store.db.transaction() as conn:
            await conn.execute(
                sa.insert(invocations).values(
                    id=invocation.id,
                    owner="ann",
                    input={},
                    request_hash="h",
                    status="queued",
                    created_at=0.0,
                    enqueued_at=0.0,
                )
            )
            raise RuntimeError("the body failed")
    assert await store.get(invocation.id) is None
    [kept] = store.db.sync.writer._idle
    accepted = await store.accept(new())
    assert accepted.created and store.db.sync.writer._idle == [kept]


async def test_a_transaction_that_runs_nothing_releases_the_lock(
    store: Store, tmp_path: Path
) -> None:
    async with store.db.transaction():
        pass
    other = Store.embedded(str(tmp_path / FILE))
    try:  # would wait for the lock, and fail after LOCK_WAIT_S, had BEGIN stayed open
        assert (await asyncio.wait_for(other.accept(new()), 5)).created
    finally:
        await other.close()


async def test_rows_stay_readable_after_the_transaction(store: Store) -> None:
    ids = sorted(str(uuid.uuid4()) for _ in range(3))
    await store.accept_many([NewInvocation(i, "ann", None, {}, "h") for i in ids])
    async with store.db.connection() as conn:
        result = await conn.execute(sa.select(invocations.c.id).order_by(invocations.c.id))
    assert [row.id for row in result] == ids


async def test_a_pool_that_never_frees_fails_as_unavailable(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_sync, "POOL_WAIT_S", 0.1)
    entered = asyncio.Event()

    async def hold() -> None:
        async with store.db.transaction():
            entered.set()
            await asyncio.sleep(1)

    holder = asyncio.create_task(hold())
    await entered.wait()
    with pytest.raises(StoreUnavailable):
        await store.accept(new())
    await holder


async def test_a_file_that_is_no_database_fails_as_a_store_error_and_leaks_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "not-a-database.db"
    path.write_bytes(b"this is not a SQLite database file" * 200)
    broken = Store.embedded(str(path))
    try:
        for _ in range(3):  # each try fails at once: the failed connection went back
            with pytest.raises(StoreError):
                await asyncio.wait_for(broken.get("x"), 5)
            with pytest.raises(StoreError):
                await asyncio.wait_for(broken.accept(new()), 5)
        assert broken.db.sync is not None
        assert broken.db.sync.writer.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await broken.close()


def test_a_raw_sqlite_error_is_classified_like_a_wrapped_one() -> None:
    assert isinstance(store_error(sqlite3.OperationalError("database is locked")), StoreUnavailable)
    assert isinstance(store_error(sqlite3.IntegrityError("NOT NULL failed")), ValueRefused)
    assert isinstance(store_error(sqlite3.DatabaseError("file is not a database")), StoreError)


async def test_a_reconnected_reader_is_read_only_again(store: Store) -> None:
    assert store.db.sync is not None
    async with store.db.connection() as conn:
        assert await conn.scalar(sa.text("PRAGMA query_only")) == 1
    [reader] = store.db.sync.reader._idle
    reader.invalidate()  # SQLAlchemy opens a new DBAPI connection on next use
    async with store.db.connection() as conn:
        assert await conn.scalar(sa.text("PRAGMA query_only")) == 1


async def test_a_cancelled_wait_for_the_lock_keeps_the_connection(
    store: Store, tmp_path: Path
) -> None:
    assert store.db.sync is not None
    await store.accept(new())  # the writer's connection is open and idle
    [writer] = store.db.sync.writer._idle
    async with write_lock_held(tmp_path / FILE):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(store.accept(new()), 0.2)
    assert store.db.sync.writer._idle == [writer]
    assert (await store.accept(new())).created


async def test_a_connection_lent_when_the_pool_closes_is_closed_when_its_transaction_ends(
    tmp_path: Path,
) -> None:
    other = Store.embedded(str(tmp_path / "closing.db"))
    assert other.db.sync is not None
    pool = other.db.sync.writer
    try:
        async with other.db.transaction() as conn:
            await conn.execute(sa.text("SELECT 1"))
            pool.close()
        assert pool._idle == [] and pool.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await other.close()


def page_size(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


async def test_a_new_file_gets_the_small_page_and_an_old_file_keeps_its_own(
    store: Store, tmp_path: Path
) -> None:
    assert page_size(tmp_path / FILE) == 2048  # the fixture's store made this file
    old = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(old)) as conn:  # as an earlier version made it
        conn.execute("PRAGMA page_size=4096")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE made_before (x)")
    reopened = Store.embedded(str(old))
    try:
        await reopened.migrate()
        await reopened.accept(new())
        assert len(await reopened.list_owned("ann")) == 1
    finally:
        await reopened.close()
    assert page_size(old) == 4096


async def test_only_a_store_whose_transactions_hold_the_loop_gathers_turns(store: Store) -> None:
    assert store.gather_turns == sqlite_sync.GATHER_TURNS > 0
    postgres = Database.of(create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none"))
    try:
        assert postgres.gather_turns == 0  # its transactions wait on the network, not the loop
    finally:
        await postgres.engine.dispose()
