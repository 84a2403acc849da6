"""Tether's Dramatiq broker on real Redis: what AsyncEnqueuer sends from asyncio reaches a woken
consumer as the message Dramatiq would have sent, promptly, delayed ones included. Each test has
a private queue; the broker's composition is checked without a server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from dramatiq.broker import Consumer, MessageProxy
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import Retries, TimeLimit

from tests.unit.test_dramatiq_wakeups import Fetcher
from tether.worker.dramatiq_private import unsleeping_consumer
from tether.worker.dramatiq_redis import RUN_INVOCATION, WokenConsumer, build_broker
from tether.worker.enqueuer import AsyncEnqueuer
from tether.worker.wakeups import WakeUpListener, WakeUpOnEnqueue

IDLE_MS = 600_000
"""A poll interval no test could sit out: a consumer answers in time only if it was woken."""
DEADLINE = 10.0


def test_the_broker_never_retries_or_times_out_a_run_and_wakes_consumers() -> None:
    broker = build_broker("redis://127.0.0.1:1/0")  # not connected until used
    kinds = {type(m) for m in broker.middleware}
    assert Retries not in kinds and TimeLimit not in kinds
    assert WakeUpOnEnqueue in kinds


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[tuple[RedisBroker, AsyncEnqueuer, str]]:
    name = f"tether-test-{uuid.uuid4().hex[:8]}"
    broker = build_broker(redis_url)
    broker.declare_queue(name)
    enqueuer = AsyncEnqueuer(redis_url, name)
    try:
        yield broker, enqueuer, name
    finally:
        await enqueuer.close()
        broker.flush(name)
        broker.close()


async def next_message(consumer: Consumer) -> MessageProxy:
    """The consumer's next message, taken on a thread as Dramatiq's consumer thread would."""

    def take() -> MessageProxy:
        while True:
            message = next(consumer)
            if message is not None:
                return message

    return await asyncio.wait_for(asyncio.to_thread(take), DEADLINE)


async def test_a_message_sent_from_asyncio_reaches_a_woken_consumer_as_dramatiq_would_send_it(
    queue: tuple[RedisBroker, AsyncEnqueuer, str],
) -> None:
    broker, enqueuer, name = queue
    consumer = broker.consume(name, prefetch=2, timeout=IDLE_MS)
    assert isinstance(consumer, WokenConsumer)
    try:
        await enqueuer.send(["an-id"], 0)
        message = await next_message(consumer)
        assert message.actor_name == RUN_INVOCATION and message.args == ("an-id",)
        assert message.queue_name == name
        consumer.ack(message)
    finally:
        consumer.close()


async def test_an_idle_consumer_is_woken_by_a_send(
    queue: tuple[RedisBroker, AsyncEnqueuer, str],
) -> None:
    broker, enqueuer, name = queue
    fetcher = Fetcher(unsleeping_consumer(broker, name, prefetch=2))
    wake_ups = WakeUpListener(broker.client, name)
    consumer = WokenConsumer(fetcher, wake_ups, prefetch=2, idle_wait=IDLE_MS / 1000)
    try:
        taking = asyncio.create_task(next_message(consumer))
        assert await asyncio.to_thread(fetcher.empty.wait, DEADLINE)  # found nothing; waits
        await enqueuer.send(["woken"], 0)
        message = await taking
        assert message.args == ("woken",)
        consumer.ack(message)
    finally:
        consumer.close()


async def test_a_delayed_send_goes_to_the_delay_queue_with_its_eta(
    queue: tuple[RedisBroker, AsyncEnqueuer, str],
) -> None:
    broker, enqueuer, name = queue
    consumer = broker.consume(f"{name}.DQ", prefetch=2, timeout=IDLE_MS)
    try:
        await enqueuer.send(["later"], 30.0)
        message = await next_message(consumer)
        assert message.args == ("later",) and message.queue_name == f"{name}.DQ"
        assert isinstance(message.options["eta"], int)
        consumer.ack(message)
    finally:
        consumer.close()


async def test_many_concurrent_sends_all_arrive(
    queue: tuple[RedisBroker, AsyncEnqueuer, str],
) -> None:
    broker, enqueuer, name = queue
    ids = [f"id-{i}" for i in range(50)]
    await asyncio.gather(*(enqueuer.send([i], 0) for i in ids[:25]), enqueuer.send(ids[25:], 0))
    consumer = broker.consume(name, prefetch=100, timeout=IDLE_MS)
    try:
        got = [await next_message(consumer) for _ in ids]
        assert sorted(m.args[0] for m in got) == sorted(ids)
    finally:
        consumer.close()
