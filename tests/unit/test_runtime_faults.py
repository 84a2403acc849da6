"""The runtime under faults, on the embedded store: an outcome written through a database blip,
an attempt stopped before its handler began, and a worker process's stop signals."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import NoQueue, embedded_store, run_to_end
from tether import AgentApp, InvocationContext
from tether.pubsub import MemoryPubSub
from tether.queue import Queue
from tether.services import Services
from tether.store.schema import NewInvocation, Status
from tether.store.store import Finished, Store, StoreUnavailable
from tether.worker.host import REPEAT_SIGNAL_WINDOW, _FirstStopOnly
from tether.worker.runtime import Runtime, StopReason


class BlippingStore(Store):
    """The embedded store, whose next ``failures`` outcome writes fail as if the database went
    away (whichever of ``finish`` / ``finish_many`` the runtime uses)."""

    failures = 0

    def _blip(self) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("OperationalError: server closed the connection")

    async def finish(self, *args: Any, **kwargs: Any) -> Finished:
        self._blip()
        return await super().finish(*args, **kwargs)

    async def finish_many(self, *args: Any, **kwargs: Any) -> Any:
        self._blip()
        return await super().finish_many(*args, **kwargs)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[BlippingStore]:
    async with embedded_store(BlippingStore, tmp_path) as s:
        yield s


def runtime_for(store: Store, app: AgentApp, finish_retry: float = 5.0) -> Runtime:
    return Runtime(
        services=Services(store, MemoryPubSub(), Queue(NoQueue())),
        app=app,
        name="host:1",
        concurrency=10,
        max_event_bytes=1 << 20,
        finish_retry=finish_retry,
    )


async def submitted(store: Store) -> str:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, {"n": 1}, "h"))
    return invocation_id


async def ran(runtime: Runtime, invocation_id: str) -> None:
    assert await runtime.start(invocation_id)
    await run_to_end(runtime, invocation_id)


def counting_app() -> tuple[AgentApp, list[int]]:
    app, calls = AgentApp(), []

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        calls.append(ctx.attempt)
        await ctx.emit({"type": "tick"})
        return {"ok": True}

    return app, calls


async def test_an_outcome_that_fails_to_write_is_retried_until_it_lands(
    store: BlippingStore,
) -> None:
    app, calls = counting_app()
    runtime = runtime_for(store, app)
    invocation_id = await submitted(store)
    store.failures = 2
    await ran(runtime, invocation_id)
    done = await store.get(invocation_id)
    assert done is not None and done.status is Status.COMPLETED and done.attempt == 1
    assert calls == [1]  # the handler ran once; only the write was repeated
    types = [e.type for e in await store.events_after(invocation_id, 0)]
    assert types == ["run.started", "tick", "run.completed"]


async def test_an_outcome_is_left_to_recovery_once_the_retry_budget_is_spent(
    store: BlippingStore,
) -> None:
    app, _ = counting_app()
    runtime = runtime_for(store, app, finish_retry=0.2)
    invocation_id = await submitted(store)
    store.failures = 100
    await ran(runtime, invocation_id)
    still = await store.get(invocation_id)
    assert still is not None and still.status is Status.ACTIVE  # the reaper's to replace now
    assert runtime.attempts == {}
    assert runtime.abandoned() == [(invocation_id, 1)]  # never beaten again, even by a claim


async def test_an_attempt_stopped_before_its_handler_began_never_runs_it(
    store: BlippingStore,
) -> None:
    app, calls = counting_app()
    runtime = runtime_for(store, app)
    stopped: dict[StopReason, str] = {}
    for reason in (StopReason.CANCEL, StopReason.SUPERSEDED):
        await runtime.settled()  # the freed slot's claim found nothing queued
        stopped[reason] = invocation_id = await submitted(store)
        assert await runtime.start(invocation_id)
        runtime.stop(invocation_id, reason)  # before the attempt's task got to run at all
        await run_to_end(runtime, invocation_id)
    assert calls == []
    cancelled_id, superseded_id = stopped[StopReason.CANCEL], stopped[StopReason.SUPERSEDED]
    cancelled = await store.get(cancelled_id)
    assert cancelled is not None and cancelled.status is Status.CANCELLED
    superseded = await store.get(superseded_id)
    assert superseded is not None and superseded.status is Status.ACTIVE


async def assert_run_fails(store: BlippingStore, app: AgentApp) -> None:
    """One invocation of ``app`` run to its end: failed, as a handler's exception fails it."""
    runtime = runtime_for(store, app)
    invocation_id = await submitted(store)
    await ran(runtime, invocation_id)
    done = await store.get(invocation_id)
    assert done is not None and done.status is Status.FAILED
    assert done.error_code == "invocation_failed"


class OwnBaseException(BaseException):
    """A library's own (gevent's Timeout, pytest's outcomes): not an Exception."""


@pytest.mark.parametrize("in_step", [True, False], ids=["step", "body"])
@pytest.mark.parametrize(
    "raised",
    [SystemExit("usage: tool [-h]"), KeyboardInterrupt(), OwnBaseException()],
    ids=["exit", "interrupt", "own"],
)
async def test_a_handler_that_calls_sys_exit_fails_its_run_and_not_the_process(
    store: BlippingStore, raised: BaseException, in_step: bool
) -> None:
    """``sys.exit`` in a handler (or in a library it calls with the user's input: argparse on a
    bad command line) fails that run; it once left the event loop, stopping ``tether dev``. So
    does a KeyboardInterrupt a step's function raises (a real Ctrl-C reaches the servers as a
    signal, never inside a handler): it stopped ``tether dev``, and a worker's event loop while
    its process lived on, every attempt it held left ``active`` and nothing claimed again. Any
    other BaseException ended the attempt with no outcome, recovered until its limit."""
    app = AgentApp()

    def explode() -> None:
        raise raised

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        if in_step:
            await ctx.step("explode", explode)
        explode()

    await assert_run_fails(store, app)


async def test_a_cancelled_error_of_the_handlers_own_fails_its_run(store: BlippingStore) -> None:
    """A step's function (or a library) that raises CancelledError while nobody cancels the
    attempt: the handler's failure. Re-raised, it ended the attempt with no outcome, and every
    recovered attempt did the same until the run failed with recovery_limit_exceeded."""
    app = AgentApp()

    async def explode() -> None:
        raise asyncio.CancelledError

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        await ctx.step("explode", explode)

    await assert_run_fails(store, app)


def test_a_stop_signal_repeated_at_once_counts_once_and_later_means_exit_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr("tether.worker.host.time.monotonic", lambda: clock[0])
    received: list[int] = []
    handler = _FirstStopOnly({int(signal.SIGTERM): lambda signum, frame: received.append(signum)})
    handler(signal.SIGTERM, None)  # the group's SIGTERM
    clock[0] += 0.01
    handler(signal.SIGTERM, None)  # the same stop, forwarded by Dramatiq's main process
    assert received == [signal.SIGTERM]
    clock[0] += REPEAT_SIGNAL_WINDOW
    handler(signal.SIGTERM, None)  # an operator insisting: Dramatiq exits at once
    assert received == [signal.SIGTERM, signal.SIGTERM]
