"""A worker's timer pass while the store is down: one warning line, then at most one every
``REPORT_EVERY`` seconds with the count since (it logged a line per pass, four a second)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from tether import repeated
from tether.repeated import Repeated
from tether.worker.node import _fire_timers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(repeated, "monotonic", fake)  # not the loop's clock
    return fake


def test_a_repeated_warning_is_logged_at_once_then_with_its_count(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    failed = Repeated(logging.getLogger("tests.repeated"), every=10)
    with caplog.at_level(logging.WARNING, logger="tests.repeated"):
        for _ in range(5):
            failed.warning("pass failed (%s)", "StoreUnavailable")
        clock.now += 10
        failed.warning("pass failed (%s)", "StoreUnavailable")
    assert caplog.messages == [
        "pass failed (StoreUnavailable)",
        "pass failed (StoreUnavailable) (5 times since the last report)",
    ]


async def test_a_timer_pass_on_a_store_that_is_down_warns_once(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    passes = 0
    done = asyncio.Event()

    async def fire_due() -> Any:
        nonlocal passes
        passes += 1
        if passes == 20:
            done.set()
        raise ConnectionError("the store is down")

    services: Any = SimpleNamespace(
        store=SimpleNamespace(journal=SimpleNamespace(fire_due=fire_due))
    )
    with caplog.at_level(logging.WARNING, logger="tether.worker.node"):
        timers = asyncio.create_task(_fire_timers(services, 0.001))
        await done.wait()
        timers.cancel()
        with pytest.raises(asyncio.CancelledError):
            await timers
    assert caplog.messages == ["timer pass failed (ConnectionError)"]


async def test_beats_and_freed_slots_claims_on_a_store_that_is_down_warn_once(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """The heartbeat (every beat) and the freed slots' claims (every slot that frees) logged a
    line each while the store was down."""
    from typing import cast

    from tether.store.errors import StoreUnavailable
    from tether.worker.heartbeat import Heartbeat
    from tether.worker.refills import FreedSlots
    from tether.worker.runtime import Runtime

    class Down:
        async def heartbeat(self, *args: Any) -> Any:
            raise StoreUnavailable("the store is down")

    runtime = SimpleNamespace(
        name="host:1", owned=lambda: [("inv", 1)], claiming=lambda: False, abandoned=lambda: []
    )
    beats = Heartbeat(
        store=cast(Any, Down()),
        runtime=cast(Runtime, runtime),
        loop=asyncio.get_running_loop(),
        interval=1.0,
        stale_after=30.0,
    )

    async def claim() -> bool | None:
        raise StoreUnavailable("the store is down")

    slots = FreedSlots(busy=lambda: 0, claim=claim)
    with caplog.at_level(logging.WARNING, logger="tether.worker"):
        for _ in range(5):
            assert await beats._beat(cast(Any, Down())) is False
            await slots._claim_once()
    assert caplog.messages == [
        "heartbeat failed (the store is down)",
        "claiming for a freed slot failed (StoreUnavailable)",
    ]
