"""The broker watch against a real Redis (a private queue and marker, never a flush of the shared
server) and the embedded store: it re-sends exactly the queued invocations whose message Redis
lost, once across watchers."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis
import sqlalchemy as sa

from tether.channels import broker_marker
from tether.store.schema import NewInvocation, invocations
from tether.store.store import Store
from tether.worker.broker_watch import BrokerWatch
from tether.worker.dramatiq_private import message_hashes
from tether.worker.enqueuer import AsyncEnqueuer


class Sent:
    """A ``Queue.send`` that records what it was asked to send."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    async def __call__(self, invocation_ids: Sequence[str], delay: float = 0.0) -> bool:
        self.ids.extend(invocation_ids)
        return True


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_url)
    try:
        yield c
    finally:
        await c.aclose()


@pytest.fixture
async def queue(client: aioredis.Redis) -> AsyncIterator[str]:
    name = f"tether-test-watch-{uuid.uuid4().hex[:8]}"
    yield name
    keys = [k async for k in client.scan_iter(match=f"*{name}*", count=1000)]
    if keys:
        await client.delete(*keys)


async def queued(store: Store, count: int) -> list[str]:
    ids = [str(uuid.uuid4()) for _ in range(count)]
    for invocation_id in ids:
        await store.accept(NewInvocation(invocation_id, "alice", None, {}, "h"))
    return ids


async def flush(client: aioredis.Redis, queue: str) -> None:
    """What FLUSHALL does to this queue: its messages and the marker are gone."""
    await client.delete(broker_marker(queue), *message_hashes(queue), f"dramatiq:{queue}")


async def test_the_first_check_without_a_marker_sends_only_what_redis_lacks(
    store: Store, client: aioredis.Redis, queue: str, redis_url: str
) -> None:
    ids = await queued(store, 5)
    enqueuer = AsyncEnqueuer(redis_url, queue)
    try:
        await enqueuer.send(ids[:2], 0.0)
    finally:
        await enqueuer.close()
    sent = Sent()
    watch = BrokerWatch(client=client, queue=queue, store=store, send=sent)
    assert await watch.check() == 3
    assert sorted(sent.ids) == sorted(ids[2:])
    assert await watch.check() is None  # the marker is there now: nothing more
    assert sorted(sent.ids) == sorted(ids[2:])


async def test_a_flush_is_answered_once_whichever_watcher_sees_it_first(
    store: Store, client: aioredis.Redis, queue: str
) -> None:
    sent = Sent()
    first = BrokerWatch(client=client, queue=queue, store=store, send=sent)
    second = BrokerWatch(client=client, queue=queue, store=store, send=sent)
    assert await first.check() == 0  # sets the marker; nothing was queued
    assert await second.check() is None
    ids = await queued(store, 4)
    await flush(client, queue)

    assert await second.check() == 4
    assert await first.check() is None  # a new token: the other one re-sent
    assert await first.check() is None and await second.check() is None
    assert sorted(sent.ids) == sorted(ids)


async def test_a_new_server_that_kept_the_marker_gets_what_it_lacks_once(
    store: Store, client: aioredis.Redis, queue: str, redis_url: str, monkeypatch: Any
) -> None:
    sent = Sent()
    watches = [BrokerWatch(client=client, queue=queue, store=store, send=sent) for _ in range(2)]
    for watch in watches:
        await watch.check()
    ids = await queued(store, 3)
    enqueuer = AsyncEnqueuer(redis_url, queue)
    try:
        await enqueuer.send(ids[:1], 0.0)  # survived the fail-over; the other two did not
    finally:
        await enqueuer.close()
    real_info = client.info

    async def new_server(section: str | None = None) -> dict[str, Any]:
        info = dict(await real_info(section))
        info["run_id"] = "a-replica-that-took-over"
        return info

    monkeypatch.setattr(client, "info", new_server)
    results = [await watch.check() for watch in watches]
    assert sorted(results, key=str) == [2, None]
    assert sorted(sent.ids) == sorted(ids[1:])


async def test_a_resent_invocation_waits_a_whole_requeue_period_before_the_reaper_sends_it(
    store: Store, client: aioredis.Redis, queue: str
) -> None:
    await queued(store, 2)
    async with store.engine.begin() as conn:  # queued for a minute already
        await conn.execute(
            sa.update(invocations).values(enqueued_at=invocations.c.enqueued_at - 60)
        )
    watch = BrokerWatch(client=client, queue=queue, store=store, send=Sent())
    assert await watch.check() == 2
    assert await store.take_unclaimed(older_than=30) == []


async def test_dramatiqs_own_enqueue_lands_where_the_watch_looks(
    store: Store, client: aioredis.Redis, queue: str, redis_url: str
) -> None:
    """The key layout is one of Dramatiq's internals (tether.worker.dramatiq_private, 6): a
    message its RedisBroker enqueues, due or delayed, is found, so it is not sent again."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    ids = await queued(store, 3)
    broker = RedisBroker(url=redis_url)  # type: ignore[no-untyped-call]
    try:
        for invocation_id, delay in ((ids[0], None), (ids[1], 60_000)):
            message: dramatiq.Message[None] = dramatiq.Message(
                queue_name=queue,
                actor_name="run_invocation",
                args=(invocation_id,),
                kwargs={},
                options={},
            )
            broker.enqueue(message, delay=delay)
    finally:
        broker.close()
        broker.client.connection_pool.disconnect()  # close() leaves the pool's sockets open
    sent = Sent()
    assert await BrokerWatch(client=client, queue=queue, store=store, send=sent).check() == 1
    assert sent.ids == [ids[2]]


class FailingOnce(Sent):
    """A ``Queue.send`` whose first call fails, as while Redis is still coming back."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def __call__(self, invocation_ids: Sequence[str], delay: float = 0.0) -> bool:
        if not self.failed:
            self.failed = True
            return False
        return await super().__call__(invocation_ids, delay)


async def test_a_resend_cut_short_is_finished_by_the_next_check_of_the_watcher_that_owes_it(
    store: Store, client: aioredis.Redis, queue: str
) -> None:
    sent = FailingOnce()
    owner = BrokerWatch(client=client, queue=queue, store=store, send=sent)
    other = BrokerWatch(client=client, queue=queue, store=store, send=sent)
    ids = await queued(store, 1)
    assert await owner.check() is None  # took the turn (no marker), and its send failed
    assert await other.check() is None  # the marker is there: not the other's to do
    ids += await queued(store, 2)
    assert await other.check() is None
    assert await owner.check() == 3  # still owed: sends what is missing now
    assert sorted(sent.ids) == sorted(ids)
    assert await owner.check() is None


async def test_queued_work_lost_while_the_send_fails_is_all_sent_on_the_next_check(
    store: Store, client: aioredis.Redis, queue: str
) -> None:
    ids = await queued(store, 3)
    sent = FailingOnce()
    watch = BrokerWatch(client=client, queue=queue, store=store, send=sent)
    assert await watch.check() is None
    assert sent.ids == []
    assert await watch.check() == 3
    assert sorted(sent.ids) == sorted(ids)
    assert await watch.check() is None
