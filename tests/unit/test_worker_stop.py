"""A stop reaches a handler even when its first cancel is lost: on Python 3.11 a handler's own
``asyncio.wait_for`` drops a cancel that lands as the awaited operation completes (redis-py, an
HTTP client, a model call all await under one), and a lone ``cancel()`` left such a handler
running: a user's cancel went unanswered and a stopping worker waited on it for ever."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from typing import Any

import pytest

from tests.fakes import run_to_end
from tests.unit.test_runtime_faults import runtime_for
from tether import AgentApp, InvocationContext
from tether.pubsub import MemoryPubSub
from tether.store.errors import StoreUnavailable
from tether.store.journal import NewWait, WaitKind
from tether.store.schema import NewInvocation, Status
from tether.store.store import Store, Superseded
from tether.worker.attempt import EventWriter
from tether.worker.running import StopReason
from tether.worker.runtime import Runtime


def busy_client_runtime(store: Store, sent: asyncio.Event) -> Runtime:
    """A runtime whose handler sends, until it is cancelled, one command after another under
    ``wait_for``, as a client of redis-py's sends each one."""

    async def send() -> None:  # done at its first step, like a small socket write
        sent.set()

    async def busy_client(input: Any, ctx: InvocationContext) -> Any:
        while True:
            await asyncio.wait_for(send(), 5)
            await asyncio.sleep(0)

    app = AgentApp()
    app.invoke(busy_client)
    return runtime_for(store, app)


async def started(store: Store, runtime: Runtime, sent: asyncio.Event) -> str:
    """An invocation whose handler is running; returned just after a command completed, where
    a lone cancel is lost."""
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, {}, "h"))
    assert await runtime.start(invocation_id)
    sent.clear()
    await sent.wait()  # resumes before the handler's wait_for wakes
    return invocation_id


async def test_a_cancel_the_handlers_wait_for_dropped_is_sent_again(store: Store) -> None:
    sent = asyncio.Event()
    runtime = busy_client_runtime(store, sent)
    invocation_id = await started(store, runtime, sent)
    runtime.stop(invocation_id, StopReason.CANCEL)
    await run_to_end(runtime, invocation_id)
    row = await store.get(invocation_id)
    assert row is not None and row.status is Status.CANCELLED


async def test_a_stopping_worker_hands_back_a_handler_that_lost_its_first_cancel(
    store: Store,
) -> None:
    sent = asyncio.Event()
    runtime = busy_client_runtime(store, sent)
    invocation_id = await started(store, runtime, sent)
    await asyncio.wait_for(runtime.drain(grace=0), 10)
    row = await store.get(invocation_id)
    assert row is not None and row.status is Status.ACTIVE  # handed back: recovery takes it
    assert not runtime.attempts


async def test_an_attempt_whose_park_was_refused_can_be_stopped_again(store: Store) -> None:
    """A park refused (superseded, a cancel pending, the store gone) hands the handler an
    exception; a handler that catches it runs on, and a stop must still reach it."""
    await store.accept(NewInvocation(str(uuid.uuid4()), "ann", None, {}, "h"))
    [claim] = await store.claim_next(1, "host:1")
    superseded = dataclasses.replace(claim, attempt=claim.attempt + 1)  # fenced: refused
    writer = EventWriter(store, MemoryPubSub(), superseded)
    with pytest.raises(Superseded):
        await writer.park([NewWait("w", WaitKind.INPUT, {"prompt": "ok?"}, None)])
    assert not writer.parked and not writer.parking


async def test_a_stop_during_a_park_that_then_fails_reaches_the_handler(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop finds the attempt parking (no cancel may cut a park); the park then fails and the
    handler carries on: the stop must still reach it."""
    parking, release = asyncio.Event(), asyncio.Event()

    async def failing_park(self: EventWriter, waits: Any) -> Any:
        parking.set()
        await release.wait()
        raise StoreUnavailable("the database went away")

    async def carries_on(input: Any, ctx: InvocationContext) -> Any:
        with contextlib.suppress(StoreUnavailable):
            await ctx.wait_for_input("go")
        await asyncio.Event().wait()  # runs on until it is cancelled

    monkeypatch.setattr(EventWriter, "_park", failing_park)
    app = AgentApp()
    app.invoke(carries_on)
    runtime = runtime_for(store, app)
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, {}, "h"))
    assert await runtime.start(invocation_id)
    await parking.wait()
    runtime.stop(invocation_id, StopReason.CANCEL)
    release.set()
    await run_to_end(runtime, invocation_id)
    row = await store.get(invocation_id)
    assert row is not None and row.status is Status.CANCELLED
