"""A cancel requested while an attempt is on its way to park is not lost: the attempt ends
``cancelled`` instead of leaving the invocation ``waiting`` with nobody to honour the cancel."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tether import AgentApp, InvocationContext
from tether.pubsub import MemoryPubSub
from tether.queue import Queue
from tether.services import Services
from tether.store.schema import NewInvocation, Status
from tether.store.store import Store
from tether.worker.runtime import Runtime


class NoQueue:
    async def send(self, invocation_ids: Sequence[str], delay: float) -> None:
        return None

    async def close(self) -> None:
        return None


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store.embedded(str(tmp_path / "tether.db"))
    await s.migrate()
    try:
        yield s
    finally:
        await s.close()


async def test_a_cancel_requested_before_the_park_commits_ends_the_attempt_cancelled(
    store: Store,
) -> None:
    app, at_gate, gate = AgentApp(), asyncio.Event(), asyncio.Event()
    cleaned_up: list[str] = []

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        await ctx.emit({"type": "before"})
        at_gate.set()
        await gate.wait()
        try:
            return await ctx.wait_for_input("approve")
        except asyncio.CancelledError:
            cleaned_up.append("cancelled")
            raise

    runtime = Runtime(
        services=Services(store, MemoryPubSub(), Queue(NoQueue())),
        app=app,
        name="host:1",
        concurrency=10,
        max_event_bytes=1 << 20,
    )
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, {}, "h"))
    assert await runtime.start(invocation_id)
    await asyncio.wait_for(at_gate.wait(), 10)
    # The cancel is recorded, but its message (or heartbeat) reaches the worker only after the
    # handler has gone on to park.
    assert await store.request_cancel(invocation_id) is None
    gate.set()
    task = runtime.attempts[invocation_id].task
    assert task is not None
    await asyncio.wait_for(task, 10)

    done = await store.get(invocation_id)
    assert done is not None and done.status is Status.CANCELLED
    assert cleaned_up == ["cancelled"]  # the handler saw the cancel as CancelledError
    types = [e.type for e in await store.events_after(invocation_id, 0)]
    assert types == ["run.started", "before", "run.cancelled"]
    assert await store.journal.waiting_for([invocation_id]) == {}
