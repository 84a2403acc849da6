"""Tether's Dramatiq broker on real Redis: what AsyncEnqueuer sends from asyncio reaches a woken
consumer as the message Dramatiq would have sent, promptly, delayed ones included. Each test has
a private queue; the broker's composition is checked without a server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import fakeredis
import pytest
import redis
from dramatiq.broker import Consumer, MessageProxy
from dramatiq.brokers.redis import RedisBroker
from dramatiq.errors import ConnectionClosed
from dramatiq.middleware import Retries, TimeLimit

from tests.unit.test_dramatiq_wakeups import Fetcher
from tether.worker.dramatiq_private import unsleeping_consumer
from tether.worker.dramatiq_redis import (
    RUN_INVOCATIONS,
    TOKENS_PER_MESSAGE,
    WokenConsumer,
    build_broker,
    tokens_in,
)
from tether.worker.enqueuer import AsyncEnqueuer
from tether.worker.wakeups import WakeUpListener, WakeUpOnEnqueue

IDLE_MS = 600_000
"""A poll interval no test could sit out: a consumer answers in time only if it was woken."""
DEADLINE = 10.0


def test_a_consumer_on_an_unreachable_redis_fails_with_dramatiqs_connection_error() -> None:
    """Not an "unexpected error": Dramatiq's consumer thread logs that with a traceback, every
    3 s per consumer, for as long as Redis is down."""
    broker = build_broker("redis://127.0.0.1:1/0")  # nothing listens on port 1
    try:
        with pytest.raises(ConnectionClosed):
            broker.consume("q")
    finally:
        broker.close()


class Unanswered(Consumer):
    """A fetcher whose Redis stopped answering."""

    def __next__(self) -> MessageProxy | None:
        raise redis.TimeoutError("Timeout reading from socket")

    def ack(self, message: MessageProxy) -> None: ...

    def nack(self, message: MessageProxy) -> None: ...


def test_a_fetch_that_times_out_is_dramatiqs_connection_error() -> None:
    server = fakeredis.FakeServer()
    wake_ups = WakeUpListener(fakeredis.FakeRedis(server=server), "q")
    consumer = WokenConsumer(Unanswered(), wake_ups, prefetch=2, idle_wait=0.1)
    try:
        with pytest.raises(ConnectionClosed):
            next(consumer)
    finally:
        consumer.close()


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
        assert message.actor_name == RUN_INVOCATIONS and message.args == (["an-id"],)
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
        assert message.args == (["woken"],)
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
        assert message.args == (["later"],) and message.queue_name == f"{name}.DQ"
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
        got: list[str] = []
        while len(got) < len(ids):
            got += tokens_in((await next_message(consumer)).args)
        assert sorted(got) == sorted(ids)
    finally:
        consumer.close()


async def test_tokens_sent_together_go_in_as_few_messages_as_allowed_one_group_per_delay(
    queue: tuple[RedisBroker, AsyncEnqueuer, str],
) -> None:
    broker, enqueuer, name = queue
    now = [f"now-{i}" for i in range(TOKENS_PER_MESSAGE * 2 + 3)]
    later = [f"later-{i}" for i in range(3)]
    await enqueuer.send(now, 0)
    await enqueuer.send(later, 30.0)
    # concurrent lone sends: all pending when the first flush starts, so they go in one
    await asyncio.gather(*(enqueuer.send([f"lone-{i}"], 0) for i in range(5)))
    assert await enqueuer.waiting() == 3 + 1 + 1  # 16 + 16 + 3; the delayed 3; the 5 lone ones
    due = broker.consume(name, prefetch=10, timeout=IDLE_MS)
    delayed = broker.consume(f"{name}.DQ", prefetch=10, timeout=IDLE_MS)
    try:
        messages = [await next_message(due) for _ in range(4)]
        assert all(m.actor_name == RUN_INVOCATIONS for m in messages)
        carried = sorted((tokens_in(m.args) for m in messages), key=len, reverse=True)
        assert [len(t) for t in carried] == [TOKENS_PER_MESSAGE, TOKENS_PER_MESSAGE, 5, 3]
        assert [i for t in carried if t[0].startswith("now") for i in t] == now  # in order
        assert sorted(carried[2]) == sorted(f"lone-{i}" for i in range(5))
        assert tokens_in((await next_message(delayed)).args) == later
    finally:
        due.close()
        delayed.close()


def test_the_tokens_in_both_message_shapes() -> None:
    assert tokens_in(("a",)) == ["a"]  # run_invocation, as sent before run_invocations
    assert tokens_in((["a", "b"],)) == ["a", "b"]
    assert tokens_in(()) == []
