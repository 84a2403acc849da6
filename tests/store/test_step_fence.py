"""A step's record is fenced like every write of an attempt: an attempt replaced while its
record was on its way (a GC pause, a frozen VM, between the fence and the insert) records
nothing, or records before its replacement reads what to replay. Never after: the
replacement would run the step again and return its own value, while every later replay
returned the superseded attempt's."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import sqlalchemy as sa

from tether.store.connection import Connection
from tether.store.engine import Database
from tether.store.journal import Journal
from tether.store.schema import NewInvocation
from tether.store.store import Store


class PausedAfterFence:
    """A database whose transactions stop after their first read (a record's fence) until
    ``go`` is set: the attempt froze there."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.fenced = asyncio.Event()
        self.go = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        async with self._db.transaction() as conn:
            yield _Paused(conn, self)


class _Paused:
    def __init__(self, conn: Connection, db: PausedAfterFence) -> None:
        self._conn, self._db = conn, db

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def scalar(self, *args: Any, **kwargs: Any) -> Any:
        result = await self._conn.scalar(*args, **kwargs)
        self._db.fenced.set()
        await self._db.go.wait()
        return result


async def test_an_attempt_replaced_between_its_fence_and_its_record_records_nothing_late(
    pg_store: Store,
) -> None:
    store = pg_store
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, {}, "h"))
    first = await store.claim(invocation_id, "host:1")
    assert first is not None
    frozen = PausedAfterFence(store.db)
    recording = asyncio.create_task(
        Journal(cast(Database, frozen)).record_step(
            invocation_id, first.attempt, "charge", "first's", None
        )
    )
    await asyncio.wait_for(frozen.fenced.wait(), 10)

    async def replace() -> set[str]:
        """The reaper gives up on the frozen attempt; another worker claims the run and reads
        what to replay."""
        assert await store.requeue_for_recovery(invocation_id, first.attempt, -3600, 0)
        second = await store.claim(invocation_id, "host:2")
        assert second is not None and second.attempt == first.attempt + 1
        return set((await store.journal.load(invocation_id)).steps)

    replacing = asyncio.create_task(replace())
    while not replacing.done() and not await waiting_for_a_lock(store):
        await asyncio.wait({replacing}, timeout=0.05)  # done, or held by the record's fence
    frozen.go.set()  # the frozen attempt thaws and goes on with its record
    recorded = await asyncio.wait_for(recording, 10)
    replayed = await asyncio.wait_for(replacing, 10)
    # Recorded: then before the replacement read it (it replays the value, never runs again).
    assert recorded == ("charge" in replayed)


async def waiting_for_a_lock(store: Store) -> bool:
    """Whether a statement of this test's database waits for a row lock (the requeue, behind
    the frozen record's fence)."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    async with store.engine.connect() as conn:
        return bool(await conn.scalar(query))
