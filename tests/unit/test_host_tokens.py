"""A worker process's share of a message's tokens (``NodeHost.start_invocations``): it takes as
many as it has free slots, waits only while it holds a single token, and sends every other token
back to the queue for a process with room. The node's loop is a real loop on its own thread, as
in a worker process; the runtime is a stand-in with real slots that records what it is given."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

import pytest
from dramatiq.brokers.stub import StubBroker

from tether.parent_watch import ParentWatch
from tether.settings import Settings
from tether.worker.host import NODE_FAILED, NodeHost, _FirstStopOnly
from tether.worker.runtime import Runtime
from tether.worker.slots import Slots

DEADLINE = 10.0


@dataclass
class SentBack:
    batches: list[list[str]] = field(default_factory=list)

    async def send(self, invocation_ids: Sequence[str], delay: float = 0.0) -> bool:
        self.batches.append(list(invocation_ids))
        return True


@dataclass
class Services:
    queue: SentBack = field(default_factory=SentBack)


class Runtime_:
    """What ``start_invocations`` uses of a runtime: its slots, its queue, ``start_in_slot``
    (which here keeps the slot, as an attempt that starts does)."""

    def __init__(self, slots: int, reserve: int = 0) -> None:
        self.slots = Slots(slots, reserve)
        self.services = Services()
        self.started: list[str] = []
        self.failing: set[str] = set()

    async def start_in_slot(self, hint: str = "") -> bool:
        if hint in self.failing:
            self.slots.give()  # as the runtime's does when its claim fails
            raise RuntimeError("the claim failed")
        self.started.append(hint)
        return True


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(DEADLINE)
        loop.close()


def hosting(loop: asyncio.AbstractEventLoop, runtime: Runtime_) -> NodeHost:
    host = NodeHost(Settings())
    host.loop, host.runtime = loop, cast(Runtime, runtime)
    return host


def settled(loop: asyncio.AbstractEventLoop) -> None:
    """Wait until the loop has run what was handed to it so far (three passes: the hand-over,
    the tokens' tasks it starts, their first steps)."""
    for _ in range(3):
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(DEADLINE)


def ids(n: int) -> list[str]:
    return [f"inv-{i}" for i in range(n)]


@pytest.mark.parametrize(
    ("slots", "reserve", "tokens", "started", "free_after"),
    [
        (20, 0, 16, 16, 4),  # every slot free: every token starts, none goes back
        (5, 0, 16, 5, 0),  # tokens beyond the free slots go back to the queue together
        (4, 2, 5, 2, 2),  # reserved slots (worker.reserve) are not for tokens
    ],
    ids=["all-free", "some-free", "reserved"],
)
def test_a_message_starts_as_many_tokens_as_slots_are_free_and_sends_the_rest_back(
    loop: asyncio.AbstractEventLoop,
    slots: int,
    reserve: int,
    tokens: int,
    started: int,
    free_after: int,
) -> None:
    runtime = Runtime_(slots, reserve)
    assert hosting(loop, runtime).start_invocations(ids(tokens)) == started
    settled(loop)
    assert runtime.started == ids(started)
    assert runtime.services.queue.batches == ([ids(tokens)[started:]] if started < tokens else [])
    assert runtime.slots.free == free_after


def test_a_full_process_sends_all_but_one_back_at_once_and_waits_with_that_one(
    loop: asyncio.AbstractEventLoop,
) -> None:
    runtime = Runtime_(slots=3)
    for _ in range(3):
        assert runtime.slots.try_take()  # full
    host = hosting(loop, runtime)
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(host.start_invocations(ids(16))), daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + DEADLINE
        while not runtime.services.queue.batches and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runtime.services.queue.batches == [ids(16)[1:]]  # before any slot freed
        assert thread.is_alive() and runtime.started == []  # the first waits: back-pressure
    finally:
        runtime.slots.give()
        runtime.slots.give()  # two free now: the waiting token takes one, and only one
    thread.join(DEADLINE)
    settled(loop)
    assert result == [1]
    assert runtime.started == ["inv-0"]
    assert runtime.services.queue.batches == [ids(16)[1:]]
    assert runtime.slots.free == 1


def test_a_lone_token_waits_for_a_slot_and_sends_nothing_back(
    loop: asyncio.AbstractEventLoop,
) -> None:
    runtime = Runtime_(slots=1)
    assert runtime.slots.try_take()
    host = hosting(loop, runtime)
    thread = threading.Thread(target=host.start_invocations, args=(["only"],), daemon=True)
    thread.start()
    try:
        thread.join(0.2)
        assert thread.is_alive()
    finally:
        runtime.slots.give()
    thread.join(DEADLINE)
    settled(loop)
    assert runtime.started == ["only"]
    assert runtime.services.queue.batches == []


def test_a_stopping_worker_drops_the_tokens_and_keeps_its_slots(
    loop: asyncio.AbstractEventLoop,
) -> None:
    runtime = Runtime_(slots=4)
    host = hosting(loop, runtime)
    host.runtime = None
    assert host.start_invocations(ids(3)) == 0
    assert runtime.slots.free == 4


def test_a_closed_loop_gives_the_slots_back_and_runs_nothing() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    runtime = Runtime_(slots=4)
    # a coroutine left unawaited warns when it is collected (pytest's unraisable hook and
    # filterwarnings = error fail the test then)
    assert hosting(loop, runtime).start_invocations(ids(6)) == 0
    gc.collect()
    assert runtime.slots.free == 4
    assert runtime.started == [] and runtime.services.queue.batches == []


def test_a_token_whose_claim_fails_leaves_the_others_of_its_message_starting(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = Runtime_(slots=8)
    runtime.failing = {"inv-1"}
    assert hosting(loop, runtime).start_invocations(ids(4)) == 4
    settled(loop)
    assert runtime.started == ["inv-0", "inv-2", "inv-3"]
    assert runtime.slots.free == 5
    assert "token for invocation inv-1: claim failed (RuntimeError)" in caplog.text


def test_a_worker_process_whose_node_did_not_start_exits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Dramatiq only logs a middleware's Exception and serves on, taking messages no node claims
    for; a SystemExit ends the process, and Dramatiq's main process exits with its status."""

    async def fails(self: NodeHost) -> None:
        raise ValueError("a setting the node cannot use")

    monkeypatch.setattr(NodeHost, "_main", fails)
    monkeypatch.setattr(ParentWatch, "of_this_process", staticmethod(lambda _stop: None))
    monkeypatch.setattr(_FirstStopOnly, "install", classmethod(lambda cls: None))
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)  # the boot sets it: put back after
    host = NodeHost(Settings())
    with pytest.raises(SystemExit) as exited:
        host.before_worker_boot(StubBroker(), None)  # type: ignore[arg-type]
    assert exited.value.code == NODE_FAILED
    assert "the worker node did not start" in caplog.text
