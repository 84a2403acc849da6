"""Run limits on the embedded store: past an event cap ``ctx.emit`` raises in the handler and
the invocation fails with ``limit_exceeded`` however the handler ends; a handler that carries on
is cancelled after the grace period; an over-duration run is cancelled and fails the same way."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.fakes import NoQueue, run_to_end
from tether import AgentApp, InvocationContext, LimitExceeded
from tether.errors import MESSAGES, ErrorCode
from tether.jsonvalue import dumps
from tether.pubsub import MemoryPubSub
from tether.queue import Queue
from tether.services import Services
from tether.settings import Settings
from tether.store.schema import NewInvocation, Status
from tether.store.store import Store
from tether.worker.run_limits import RunLimits
from tether.worker.runtime import Runtime

Handler = Callable[[Any, InvocationContext], Awaitable[Any]]


async def run(store: Store, handler: Handler, limits: RunLimits) -> str:
    """Run ``handler`` as one invocation's attempt under ``limits``; its id once it has ended."""
    app = AgentApp()
    app.invoke(handler)
    runtime = Runtime(
        services=Services(store, MemoryPubSub(), Queue(NoQueue())),
        app=app,
        name="host:1",
        concurrency=10,
        max_event_bytes=1 << 20,
        limits=limits,
    )
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, {}, "h"))
    assert await runtime.start(invocation_id)
    await run_to_end(runtime, invocation_id)
    return invocation_id


async def assert_failed_past_a_limit(store: Store, invocation_id: str) -> list[str]:
    """The invocation failed with limit_exceeded, row and terminal event alike; its event types."""
    row = await store.get(invocation_id)
    assert row is not None and row.status is Status.FAILED
    assert row.error_code == "limit_exceeded"
    assert row.error_message == MESSAGES[ErrorCode.LIMIT_EXCEEDED]
    events = await store.events_after(invocation_id, 0)
    assert events[-1].type == "run.failed"
    assert events[-1].data["error"]["code"] == "limit_exceeded"
    return [e.type for e in events]


async def test_an_emit_past_the_event_cap_raises_and_the_run_fails_with_limit_exceeded(
    store: Store,
) -> None:
    async def emit_forever(input: Any, ctx: InvocationContext) -> Any:
        while True:
            await ctx.emit({"type": "tick"})

    invocation_id = await run(store, emit_forever, RunLimits(max_events=3))
    types = await assert_failed_past_a_limit(store, invocation_id)
    assert types == ["run.started", "tick", "tick", "tick", "run.failed"]


async def test_the_byte_cap_counts_the_json_bytes_of_each_event(store: Store) -> None:
    event = {"type": "tick", "pad": "x" * 50}
    size = len(dumps(event).encode())

    async def emit_forever(input: Any, ctx: InvocationContext) -> Any:
        while True:
            await ctx.emit(event)

    invocation_id = await run(store, emit_forever, RunLimits(max_event_bytes=2 * size + 1))
    types = await assert_failed_past_a_limit(store, invocation_id)
    assert types == ["run.started", "tick", "tick", "run.failed"]


async def test_a_handler_that_catches_the_limit_and_returns_still_fails(store: Store) -> None:
    caught: list[str] = []

    async def wrap_up(input: Any, ctx: InvocationContext) -> Any:
        try:
            for i in range(10):
                await ctx.emit({"type": "tick", "i": i})
        except LimitExceeded as exc:
            caught.append(str(exc))
            with pytest.raises(LimitExceeded):  # and every later emit, too
                await ctx.emit({"type": "one-more"})
        return {"partial": True}

    invocation_id = await run(store, wrap_up, RunLimits(max_events=2))
    assert caught == ["this run went past its limit on events (2)"]
    assert await assert_failed_past_a_limit(store, invocation_id) == [
        "run.started",
        "tick",
        "tick",
        "run.failed",
    ]


async def test_a_handler_past_the_limit_cannot_wait_its_way_out(store: Store) -> None:
    """A wait would park the run and let a later attempt start afresh: past a limit it raises
    like an emit, and the run fails however the handler ends."""
    refused: list[str] = []

    async def wait_it_out(input: Any, ctx: InvocationContext) -> Any:
        with contextlib.suppress(LimitExceeded):
            for i in range(10):
                await ctx.emit({"type": "tick", "i": i})
        try:
            return await ctx.wait_for_input("more", timeout=60)
        except LimitExceeded as exc:
            refused.append(str(exc))
        return {"partial": True}

    invocation_id = await run(store, wait_it_out, RunLimits(max_events=2))
    assert refused == ["this run went past its limit on events (2)"]
    types = await assert_failed_past_a_limit(store, invocation_id)
    assert types == ["run.started", "tick", "tick", "run.failed"]


async def test_a_handler_that_carries_on_past_the_limit_is_cancelled_after_the_grace(
    store: Store,
) -> None:
    cancelled = asyncio.Event()

    async def ignore_it(input: Any, ctx: InvocationContext) -> Any:
        with contextlib.suppress(LimitExceeded):
            await ctx.emit({"type": "tick"})
        try:
            await asyncio.Event().wait()  # never set: only a cancel ends this
        finally:
            cancelled.set()

    invocation_id = await run(store, ignore_it, RunLimits(max_event_bytes=1, grace=0.05))
    assert cancelled.is_set()
    assert await assert_failed_past_a_limit(store, invocation_id) == ["run.started", "run.failed"]


async def test_an_over_duration_run_is_cancelled_and_fails_with_limit_exceeded(
    store: Store,
) -> None:
    cancelled = asyncio.Event()

    async def hold(input: Any, ctx: InvocationContext) -> Any:
        await ctx.emit({"type": "tick"})
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    invocation_id = await run(store, hold, RunLimits(max_duration=0.05))
    assert cancelled.is_set()
    types = await assert_failed_past_a_limit(store, invocation_id)
    assert types == ["run.started", "tick", "run.failed"]


async def test_a_run_within_its_limits_completes(store: Store) -> None:
    async def small(input: Any, ctx: InvocationContext) -> Any:
        for i in range(3):
            await ctx.emit({"type": "tick", "i": i})
        return {"ok": True}

    limits = RunLimits(max_events=3, max_event_bytes=1000, max_duration=60)
    invocation_id = await run(store, small, limits)
    row = await store.get(invocation_id)
    assert row is not None and row.status is Status.COMPLETED and row.output == {"ok": True}


def test_the_limits_come_from_the_settings_with_their_documented_defaults() -> None:
    defaults = RunLimits.from_settings(Settings())
    assert defaults == RunLimits(
        max_events=100_000, max_event_bytes=256 * 1024 * 1024, max_duration=0.0, grace=5.0
    )
