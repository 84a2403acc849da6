"""The runtime around a park, on the embedded store: a cancel requested on the way to parking is
not lost, and a heartbeat that sees the parked row before the attempt has left does not stop it
halfway (its ``run.waiting`` still reaches the readers)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest

from tests.fakes import NoQueue, run_to_end
from tether import AgentApp, InvocationContext
from tether.channels import events_channel
from tether.events import decode_batch
from tether.pubsub import MemoryPubSub
from tether.queue import Queue
from tether.services import Services
from tether.store.schema import NewInvocation, Status
from tether.store.store import Store, StoreUnavailable
from tether.worker.runtime import Runtime, StopReason


def runtime_for(
    store: Store, app: AgentApp, pubsub: MemoryPubSub | None = None, finish_retry: float = 0.0
) -> Runtime:
    return Runtime(
        services=Services(store, pubsub or MemoryPubSub(), Queue(NoQueue())),
        app=app,
        name="host:1",
        concurrency=10,
        max_event_bytes=1 << 20,
        finish_retry=finish_retry,
    )


async def accepted(store: Store) -> str:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, {}, "h"))
    return invocation_id


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

    runtime = runtime_for(store, app)
    invocation_id = await accepted(store)
    assert await runtime.start(invocation_id)
    await asyncio.wait_for(at_gate.wait(), 10)
    # The cancel is recorded, but its message (or heartbeat) reaches the worker only after the
    # handler has gone on to park.
    assert await store.request_cancel(invocation_id) is None
    gate.set()
    await run_to_end(runtime, invocation_id)

    done = await store.get(invocation_id)
    assert done is not None and done.status is Status.CANCELLED
    assert cleaned_up == ["cancelled"]  # the handler saw the cancel as CancelledError
    types = [e.type for e in await store.events_after(invocation_id, 0)]
    assert types == ["run.started", "before", "run.cancelled"]
    assert await store.journal.waiting_for([invocation_id]) == {}


async def test_a_heartbeat_that_finds_the_row_parked_does_not_stop_the_attempt_halfway(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether.worker.runtime")
    app, committed, release = AgentApp(), asyncio.Event(), asyncio.Event()

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        return await ctx.wait_for_input("approve")

    real_park = store.parks.park_many

    async def park_then_pause(*args: Any, **kwargs: Any) -> Any:
        stored = await real_park(*args, **kwargs)
        committed.set()  # the row is waiting now; the attempt has not left yet
        await release.wait()
        return stored

    store.parks.park_many = park_then_pause  # type: ignore[method-assign]
    pubsub = MemoryPubSub()
    runtime = runtime_for(store, app, pubsub)
    invocation_id = await accepted(store)
    async with pubsub.subscribe(events_channel(invocation_id)) as readers:
        assert await runtime.start(invocation_id)
        await asyncio.wait_for(committed.wait(), 10)
        # What the heartbeat thread does when its statement no longer matches the row:
        runtime.stop(invocation_id, StopReason.SUPERSEDED, attempt=1)
        release.set()
        await run_to_end(runtime, invocation_id)
        published = []
        while (message := await readers.get(timeout=0.01)) is not None:
            published += [e.type for e in decode_batch(str(message))]

    assert "run.waiting" in published  # readers learn at once that it parked
    assert "parked; waiting" in caplog.text and "superseded" not in caplog.text
    parked = await store.get(invocation_id)
    assert parked is not None and parked.status is Status.WAITING


async def test_a_step_record_and_a_park_are_retried_through_a_database_blip(
    store: Store,
) -> None:
    app, calls = AgentApp(), []

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        async def charge() -> str:
            calls.append(ctx.attempt)
            return "charged"

        await ctx.step("charge", charge)
        return await ctx.wait_for_input("approve")

    failures = {"record_step": 2, "park_many": 2}
    writes = {"record_step": store.journal, "park_many": store.parks}

    def blipping(name: str) -> Any:
        real = getattr(writes[name], name)

        async def write(*args: Any, **kwargs: Any) -> Any:
            if failures[name]:
                failures[name] -= 1
                raise StoreUnavailable("OperationalError: server closed the connection")
            return await real(*args, **kwargs)

        return write

    for name in failures:
        setattr(writes[name], name, blipping(name))
    runtime = runtime_for(store, app, finish_retry=5.0)
    invocation_id = await accepted(store)
    assert await runtime.start(invocation_id)
    await run_to_end(runtime, invocation_id)

    parked = await store.get(invocation_id)
    assert parked is not None and parked.status is Status.WAITING  # not failed by the blips
    assert failures == {"record_step": 0, "park_many": 0} and calls == [1]
    assert (await store.journal.load(invocation_id)).steps["charge"].result == "charged"


async def test_a_resumed_attempt_stays_registered_while_the_parked_one_is_still_unwinding(
    store: Store,
) -> None:
    """A handler may still be unwinding its park (an ``async with`` closing a client, a
    ``finally`` that awaits) when its input arrives and the same process claims the resumed
    attempt. The parked attempt's end must not drop the resumed one from the process's
    attempts: it would get no heartbeat (the reaper then replaces it while it still runs, and
    its steps run twice) and no cancel."""
    app, unwind, resumed_running, release = (
        AgentApp(),
        asyncio.Event(),
        asyncio.Event(),
        asyncio.Event(),
    )

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        try:
            value = await ctx.wait_for_input("approve")
        finally:
            if ctx.attempt == 1:
                await unwind.wait()  # closing something, slowly
        resumed_running.set()
        await release.wait()
        return value

    runtime = runtime_for(store, app)
    invocation_id = await accepted(store)
    assert await runtime.start(invocation_id)
    for _ in range(500):  # until the park committed (the first attempt has not left yet)
        row = await store.get(invocation_id)
        if row is not None and row.status is Status.WAITING:
            break
        await asyncio.sleep(0.01)
    parked = runtime.attempts[invocation_id]
    assert await store.journal.resolve_input(invocation_id, "approve", "yes") == "resumed"
    assert await runtime.start(invocation_id)  # the resumed attempt, in the same process
    await asyncio.wait_for(resumed_running.wait(), 10)
    unwind.set()  # the parked attempt now leaves
    assert parked.task is not None
    await asyncio.wait_for(asyncio.gather(parked.task), 10)

    assert runtime.owned() == [(invocation_id, 2)]  # still beaten by the heartbeat
    release.set()
    await run_to_end(runtime, invocation_id)
    done = await store.get(invocation_id)
    assert done is not None and done.status is Status.COMPLETED and done.attempt == 2


async def test_a_steps_first_run_gets_its_value_as_every_replay_will(store: Store) -> None:
    """The first run gets the value as the store gives it back: numbers as PostgreSQL's jsonb
    keeps them (1e23 as 10**23, -0.0 as 0.0), on SQLite too, so no run sees another value."""
    app, seen = AgentApp(), []

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        async def measure() -> list[float]:
            return [1e23, -0.0, 0.5]

        seen.append(await ctx.step("measure", measure))
        return None

    runtime = runtime_for(store, app)
    invocation_id = await accepted(store)
    assert await runtime.start(invocation_id)
    await run_to_end(runtime, invocation_id)
    replayed = (await store.journal.load(invocation_id)).steps["measure"].result
    assert repr(seen) == repr([replayed]) == repr([[10**23, 0.0, 0.5]])
