"""Publishes through Redis when Redis is away: reported in one line at a time, held up to a
bound, and not waited for past a bound at close (``tether.pubsub_redis``)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tether import pubsub_redis
from tether.channels import events_channel
from tether.pubsub_redis import RedisPubSub

UNREACHABLE = "redis://127.0.0.1:1/0"  # nothing listens there


class StuckRedisPubSub(RedisPubSub):
    """Its batches never reach Redis until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__(UNREACHABLE)
        self.release = asyncio.Event()
        self.sent: list[tuple[str, list[str]]] = []

    async def _publish_batch(self, batch: list[tuple[str, list[str]]]) -> list[None]:
        await self.release.wait()
        self.sent.extend(batch)
        return [None] * len(batch)


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def test_publishes_that_fail_together_are_reported_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pubsub = RedisPubSub(UNREACHABLE)
    try:
        with caplog.at_level(logging.WARNING, logger="tether.pubsub_redis"):
            for n in range(50):
                pubsub.publish_soon(events_channel(f"i-{n}"), ["[]"])
            await pubsub._publishes.idle()
    finally:
        await pubsub.close()
    [line] = lines(caplog, "failed")
    assert line.startswith("publish to tether:events:i-0 failed (ConnectionError)")


async def test_past_the_bound_publishes_are_dropped_and_reported(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pubsub_redis, "MAX_WAITING_PUBLISHES", 3)
    pubsub = StuckRedisPubSub()
    try:
        with caplog.at_level(logging.WARNING, logger="tether.pubsub_redis"):
            for n in range(10):  # one loop turn: the first batch has not started yet
                pubsub.publish_soon(events_channel(f"i-{n}"), [str(n)])
            pubsub.release.set()
            await pubsub._publishes.idle()
    finally:
        await pubsub.close()
    assert [message for _, [message] in pubsub.sent] == ["0", "1", "2"]
    [line] = lines(caplog, "dropped")
    assert "publish to tether:events:i-3 dropped: 1 publishes dropped" in line


async def test_close_does_not_wait_for_redis_past_its_bound(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pubsub_redis, "CLOSE_WAIT", 0.05)
    pubsub = StuckRedisPubSub()
    pubsub.publish_soon(events_channel("i-1"), ["[]"])
    await asyncio.sleep(0)  # the batch is in flight, stuck
    pubsub.publish_soon(events_channel("i-2"), ["[]"])
    with caplog.at_level(logging.INFO, logger="tether.pubsub_redis"):
        await asyncio.wait_for(pubsub.close(), 5)
    assert lines(caplog, "closing: publishes still waiting for Redis after 0.05s were not sent")
    assert pubsub.sent == []
    assert not lines(caplog, "failed")  # given up at close, not failed
