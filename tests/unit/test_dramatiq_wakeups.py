"""Wake-ups and the woken consumer, on Dramatiq's StubBroker and an in-memory Redis (fakeredis):
every enqueue wakes its queue's consumers, an idle consumer waits for a wake-up rather than
polling, and a full one waits for an acknowledgement. Threads are waited on with deadlines."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import dramatiq
import fakeredis
import pytest
import redis
from dramatiq.broker import Consumer, MessageProxy
from dramatiq.brokers.stub import StubBroker

from tether.channels import wake_channel
from tether.worker.dramatiq_redis import WokenConsumer
from tether.worker.wakeups import WAKE_UP, WakeUpListener, WakeUpOnEnqueue, publish_wake_up

IDLE = 600.0
"""An idle wait no test could sit out: a consumer returns in time only if something woke it."""
DEADLINE = 10.0


@pytest.fixture
def server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


def client(server: fakeredis.FakeServer) -> redis.Redis:
    return fakeredis.FakeRedis(server=server)


@pytest.fixture
def stub(server: fakeredis.FakeServer) -> Iterator[StubBroker]:
    broker = StubBroker(middleware=[WakeUpOnEnqueue(client(server))])
    broker.declare_queue("q")
    try:
        yield broker
    finally:
        broker.close()


def message(queue: str = "q") -> dramatiq.Message[Any]:
    return dramatiq.Message(queue_name=queue, actor_name="a", args=(), kwargs={}, options={})


def in_thread(call: Callable[[], Any]) -> Callable[[], Any]:
    """Start ``call`` on a thread; the returned function waits for its result (with a deadline)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()

    def join() -> Any:
        thread.join(DEADLINE)
        assert not thread.is_alive(), "still waiting: nothing woke it"
        return result[0]

    return join


def test_every_enqueue_wakes_the_consumers_of_the_queue_it_lands_on(
    stub: StubBroker, server: fakeredis.FakeServer
) -> None:
    now, later = WakeUpListener(client(server), "q"), WakeUpListener(client(server), "q.DQ")
    stub.enqueue(message())
    assert now.wait(DEADLINE) and not later.wait(0)
    stub.enqueue(message(), delay=60_000)
    assert later.wait(DEADLINE) and not now.wait(0)


def test_a_burst_of_wake_ups_is_answered_by_one_wait(server: fakeredis.FakeServer) -> None:
    listener = WakeUpListener(client(server), "q")
    for _ in range(5):
        publish_wake_up(client(server), "q")
    assert listener.wait(DEADLINE)
    assert not listener.wait(0)


def test_a_wake_up_goes_out_on_the_queues_channel(server: fakeredis.FakeServer) -> None:
    pubsub = client(server).pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]
    pubsub.subscribe(wake_channel("q"))
    publish_wake_up(client(server), "q")
    got = None
    while got is None:
        got = pubsub.get_message(timeout=DEADLINE)
    assert got["channel"] == wake_channel("q").encode() and got["data"] == WAKE_UP


class Unreachable:
    def publish(self, channel: str, message: bytes) -> int:
        raise redis.ConnectionError("Redis is down")


def test_an_enqueue_whose_wake_up_cannot_be_sent_still_succeeds() -> None:
    broker = StubBroker(middleware=[WakeUpOnEnqueue(Unreachable())])
    broker.declare_queue("q")
    broker.enqueue(message())
    assert broker.queues["q"].qsize() == 1


class Fetcher(Consumer):
    """A fetcher that says when it last came back empty-handed (its consumer then waits)."""

    def __init__(self, inner: Consumer) -> None:
        self._inner = inner
        self.empty = threading.Event()

    def __next__(self) -> MessageProxy | None:
        message = next(self._inner)
        if message is None:
            self.empty.set()
        return message

    def ack(self, message: MessageProxy) -> None:
        self._inner.ack(message)

    def nack(self, message: MessageProxy) -> None:
        self._inner.nack(message)

    def close(self) -> None:
        self._inner.close()


def woken(
    stub: StubBroker, server: fakeredis.FakeServer, prefetch: int = 2
) -> tuple[WokenConsumer, Fetcher]:
    fetcher = Fetcher(stub.consume("q", prefetch=prefetch, timeout=0))  # at once when empty
    wake_ups = WakeUpListener(client(server), "q")
    return WokenConsumer(fetcher, wake_ups, prefetch=prefetch, idle_wait=IDLE), fetcher


def test_a_woken_consumer_hands_out_what_is_queued(
    stub: StubBroker, server: fakeredis.FakeServer
) -> None:
    sent = stub.enqueue(message())
    consumer, _ = woken(stub, server)
    got = next(consumer)
    assert isinstance(got, MessageProxy) and got.message_id == sent.message_id
    consumer.ack(got)


def test_an_idle_consumer_waits_for_a_wake_up_not_for_its_poll(
    stub: StubBroker, server: fakeredis.FakeServer
) -> None:
    consumer, fetcher = woken(stub, server)
    waiting = in_thread(lambda: next(consumer))
    assert fetcher.empty.wait(DEADLINE)  # it found the queue empty and waits
    sent = stub.enqueue(message())  # the broker's middleware publishes the wake-up
    assert waiting() is None  # woken: its turn goes back to Dramatiq's consumer thread
    got = next(consumer)
    assert got is not None and got.message_id == sent.message_id


def test_a_full_consumer_waits_for_half_its_room_then_fetches_again(
    stub: StubBroker, server: fakeredis.FakeServer
) -> None:
    for _ in range(3):
        stub.enqueue(message())
    consumer, _ = woken(stub, server, prefetch=2)
    first, second = next(consumer), next(consumer)
    assert first is not None and second is not None
    waiting = in_thread(lambda: next(consumer))  # full: two in hand
    consumer.ack(first)  # a worker thread acknowledges one: half the room is free
    assert waiting() is None
    third = next(consumer)
    assert third is not None and third.message_id not in {first.message_id, second.message_id}


def test_closing_a_woken_consumer_closes_its_subscription(
    stub: StubBroker, server: fakeredis.FakeServer
) -> None:
    consumer, _ = woken(stub, server)
    consumer.close()
    assert client(server).pubsub_numsub(wake_channel("q")) == [(wake_channel("q").encode(), 0)]
