"""The embedded store's SQLite calls run on the event loop's thread (no hop to aiosqlite's
thread per call), its connections still open and close cleanly, and a second writer on the same
file waits for the first one's transaction instead of failing."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

import sqlalchemy as sa

from tether.store.schema import NewInvocation
from tether.store.sqlite_inline import InlineConnection, inline_creator
from tether.store.store import Store


async def test_calls_run_on_the_callers_thread(tmp_path: Path) -> None:
    connection = await inline_creator(str(tmp_path / "t.db"))()
    assert isinstance(connection, InlineConnection)
    try:
        assert await connection._execute(threading.get_ident) == threading.get_ident()
        async with connection.execute("SELECT 1 + 1") as cursor:
            assert await cursor.fetchone() == (2,)
    finally:
        await connection.close()
    assert await _stopped(connection)  # aiosqlite's thread closed it and ended


async def _stopped(connection: InlineConnection) -> bool:
    for _ in range(100):
        if not connection._thread.is_alive():
            return True
        await asyncio.sleep(0.01)
    return False


async def test_every_connection_of_the_embedded_store_is_inline(tmp_path: Path) -> None:
    store = Store.embedded(str(tmp_path / "t.db"))
    try:
        await store.migrate()
        engines = [store.db.engine] + ([store.db.reader] if store.db.reader else [])
        for engine in engines:
            async with engine.connect() as conn:
                raw = await conn.get_raw_connection()
                assert isinstance(raw.driver_connection, InlineConnection)
    finally:
        await store.close()


async def test_a_writer_on_another_thread_is_waited_for(tmp_path: Path) -> None:
    """Another thread's store (the heartbeat's) holds the write lock for a moment; this loop's
    write waits for it (busy timeout) and then goes through, losing nothing."""
    path = str(tmp_path / "t.db")
    store = Store.embedded(path)
    await store.migrate()
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        async def hold() -> None:
            other = Store.embedded(path)
            try:
                async with other.db.transaction() as conn:  # BEGIN IMMEDIATE
                    await conn.execute(sa.text("SELECT 1"))
                    held.set()
                    release.wait(5)
            finally:
                await other.close()

        asyncio.run(hold())

    thread = threading.Thread(target=hold_the_lock)
    thread.start()
    try:
        assert await asyncio.to_thread(held.wait, 5)
        threading.Timer(0.2, release.set).start()
        invocation_id = str(uuid.uuid4())
        await store.accept(NewInvocation(invocation_id, "ann", None, {}, "h"))
        assert await store.get(invocation_id) is not None
    finally:
        release.set()
        await asyncio.to_thread(thread.join, 10)
        await store.close()
