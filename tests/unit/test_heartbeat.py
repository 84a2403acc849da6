"""The heartbeat thread against the embedded SQLite store: it beats through a blocked event loop,
stops superseded attempts, relays cancel requests, covers claims in flight, and gives up every
attempt when the database stays unreachable."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
import sqlalchemy as sa

from tether.store.schema import NewInvocation, invocations
from tether.store.store import Store
from tether.worker.heartbeat import Heartbeat
from tether.worker.runtime import Runtime, StopReason

inv = invocations.c
NAME = "host:1"


class FakeRuntime:
    """What the heartbeat thread reads from a runtime, and the stops it asks for."""

    name = NAME

    def __init__(self) -> None:
        self.running: list[tuple[str, int]] = []
        self.claims: list[str] = []
        self.left: list[tuple[str, int]] = []
        self.stops: list[tuple[str, StopReason, int | None]] = []

    def owned(self) -> list[tuple[str, int]]:
        return list(self.running)

    def claiming(self) -> bool:
        return bool(self.claims)

    def abandoned(self) -> list[tuple[str, int]]:
        return list(self.left)

    def stop(self, invocation_id: str, reason: StopReason, attempt: int | None = None) -> None:
        self.stops.append((invocation_id, reason, attempt))

    def stop_all(self, reason: StopReason) -> None:
        self.stops.append(("*", reason, None))


@pytest.fixture
def runtime() -> FakeRuntime:
    return FakeRuntime()


@pytest.fixture
async def beating(store: Store, runtime: FakeRuntime) -> AsyncIterator[Heartbeat]:
    thread = Heartbeat(
        store=store,
        runtime=cast(Runtime, runtime),
        loop=asyncio.get_running_loop(),
        interval=0.05,
        stale_after=0.5,
    )
    thread.start()
    yield thread
    thread.stop()
    await asyncio.to_thread(thread.join, 10)


async def claimed(store: Store) -> str:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, 1, "h"))
    assert await store.claim(invocation_id, NAME) is not None
    return invocation_id


async def heartbeat_at(store: Store, invocation_id: str) -> float:
    async with store.engine.connect() as conn:
        value = await conn.scalar(sa.select(inv.heartbeat_at).where(inv.id == invocation_id))
    assert value is not None
    return float(value)


async def eventually(predicate: Any, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_beats_go_on_while_the_event_loop_is_blocked(
    store: Store, runtime: FakeRuntime, beating: Heartbeat
) -> None:
    invocation_id = await claimed(store)
    runtime.running.append((invocation_id, 1))
    before = await heartbeat_at(store, invocation_id)
    time.sleep(1.0)  # noqa: ASYNC251 - a handler blocking the loop, as the heartbeat must survive
    assert await heartbeat_at(store, invocation_id) > before + 0.5
    assert runtime.stops == []


async def test_a_superseded_attempt_is_stopped_and_a_cancel_request_relayed(
    store: Store, runtime: FakeRuntime, beating: Heartbeat
) -> None:
    replaced, cancelled = await claimed(store), await claimed(store)
    async with store.engine.begin() as conn:  # a replacement attempt took over the first one
        await conn.execute(sa.update(invocations).where(inv.id == replaced).values(attempt=2))
    await store.request_cancel(cancelled)
    runtime.running.extend([(replaced, 1), (cancelled, 1)])
    await eventually(lambda: len({s[0] for s in runtime.stops}) == 2)
    assert (replaced, StopReason.SUPERSEDED, 1) in runtime.stops
    assert (cancelled, StopReason.CANCEL, 1) in runtime.stops


async def test_a_claim_in_flight_is_beaten_by_worker_name(
    store: Store, runtime: FakeRuntime, beating: Heartbeat
) -> None:
    invocation_id = await claimed(store)  # committed, but not yet registered as running
    runtime.claims.append(invocation_id)
    before = await heartbeat_at(store, invocation_id)
    deadline = time.monotonic() + 5
    while await heartbeat_at(store, invocation_id) <= before:
        assert time.monotonic() < deadline, "the claim in flight was not beaten"
        await asyncio.sleep(0.02)
    assert runtime.stops == []  # not judged superseded either


async def test_another_workers_claim_is_not_beaten(store: Store, runtime: FakeRuntime) -> None:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, 1, "h"))
    assert await store.claim(invocation_id, "elsewhere:2") is not None
    assert await store.heartbeat([], True, NAME) == {}
    assert await store.heartbeat([], True, "elsewhere:2") == {invocation_id: False}


async def test_an_attempt_left_to_recovery_is_not_beaten_by_a_claim_in_flight(
    store: Store,
) -> None:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, 1, "h"))
    assert await store.claim(invocation_id, NAME) is not None
    assert await store.heartbeat([], True, NAME, [(invocation_id, 1)]) == {}
    assert await store.heartbeat([], True, NAME, [(invocation_id, 2)]) == {invocation_id: False}


class Unreachable:
    """A store whose database is down: every heartbeat fails."""

    def sibling(self) -> Unreachable:
        return self

    async def heartbeat(self, *args: Any) -> dict[str, bool]:
        raise ConnectionError("database is down")

    async def close(self) -> None:
        return None


async def test_when_beats_fail_for_stale_after_every_attempt_is_stopped(
    runtime: FakeRuntime,
) -> None:
    runtime.running.append(("some-invocation", 1))
    thread = beating_on(Unreachable(), runtime)
    try:
        await eventually(lambda: ("*", StopReason.SUPERSEDED, None) in runtime.stops)
    finally:
        thread.stop()
        thread.join(10)


def beating_on(store: object, runtime: FakeRuntime) -> Heartbeat:
    """A heartbeat thread, started, on a fake store whose attempts go stale after 0.3 s."""
    thread = Heartbeat(
        store=cast(Store, store),
        runtime=cast(Runtime, runtime),
        loop=asyncio.get_running_loop(),
        interval=0.05,
        stale_after=0.3,
    )
    thread.start()
    return thread


class HangsOnce:
    """A store whose first heartbeat never answers (a connection gone half-open) and whose later
    ones, on another connection, do."""

    def __init__(self) -> None:
        self.beats = 0

    def sibling(self) -> HangsOnce:
        return self

    async def heartbeat(self, owned: list[tuple[str, int]], *args: Any) -> dict[str, bool]:
        self.beats += 1
        if self.beats == 1:
            await asyncio.Event().wait()
        return {invocation_id: False for invocation_id, _ in owned}  # alive, no cancel

    async def close(self) -> None:
        return None


async def test_a_hung_beat_is_given_up_once_stale_and_the_next_one_beats_again(
    runtime: FakeRuntime,
) -> None:
    """The attempts stop once the hung beat makes them stale, and the next beat is a new one:
    waiting on the hung one for good would stop every attempt claimed from then on."""
    runtime.running.append(("some-invocation", 1))
    store = HangsOnce()
    thread = beating_on(store, runtime)
    try:
        await eventually(lambda: store.beats >= 3)
        stops = len(runtime.stops)
        await eventually(lambda: store.beats >= 6)
        assert runtime.stops[:1] == [("*", StopReason.SUPERSEDED, None)]
        assert len(runtime.stops) == stops  # beating again: no more stops
    finally:
        thread.stop()
        await asyncio.to_thread(thread.join, 10)
