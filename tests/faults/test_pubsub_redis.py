"""``pubsub_redis_url``: pub/sub on a Redis of its own, the broker on ``redis_url``.

Real processes: a gateway and a worker with the broker on the shared Redis and pub/sub on a
private ``redis-server``. Streams, announcements and cancels subscribe there and nowhere else;
with that server gone, background invocations still run (their tokens are on the broker).
"""

from __future__ import annotations

import asyncio

import pytest
import redis

from tests.client import new_id
from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import TERMINAL, Db, PrivateRedis, api_for, start_workers, until
from tether.channels import CANCEL_CHANNEL, QUEUED_CHANNEL, events_channel

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


def subscribers(url: str, channel: str) -> int:
    client = redis.Redis.from_url(url, socket_timeout=2)
    try:
        counts = dict(client.pubsub_numsub(channel))
        return int(counts.get(channel.encode(), 0))
    finally:
        client.close()


async def test_streams_announcements_and_cancels_go_through_the_pubsub_redis(
    fresh_db: str, redis_url: str, private_redis: PrivateRedis, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url, TETHER_PUBSUB_REDIS_URL=private_redis.url)
    _, base = cluster.start_gateway()
    start_workers(cluster, 1)
    await until(lambda: subscribers(private_redis.url, QUEUED_CHANNEL) >= 1, 30, "announcements")
    assert subscribers(private_redis.url, CANCEL_CHANNEL) >= 1

    async with api_for(base) as api:
        streamed = new_id()
        spec = {"emit": 5, "emit_sleep": 0.3}
        reading = asyncio.create_task(api.stream({"id": streamed, "input": {"default": spec}}))
        channel = events_channel(streamed)
        await until(lambda: subscribers(private_redis.url, channel) == 1, 30, "the stream")
        assert subscribers(redis_url, channel) == 0
        response, events = await reading
        assert response.status == 200
        types = [e.type for e in events]
        assert types.count("tick") == 5 and types[-1] == "run.completed", types

        held = new_id()
        body = {"id": held, "input": {"default": {"wait_cancel": True}}, "background": True}
        assert (await api.post(body))[0] == 202
        await api.wait_status(held, {"active"})
        assert (await api.cancel(held))[0] in (200, 202)
        assert (await api.wait_status(held, {"cancelled"}, timeout=10))["status"] == "cancelled"

    private_redis.kill()  # pub/sub gone: tokens are on the broker, the work still runs
    db = Db(fresh_db)
    async with api_for(base) as api:
        async with api.session.get(f"{base}/readyz") as r:
            assert r.status == 503
            checks = (await r.json())["checks"]
        assert checks == {"database": "ok", "broker": "ok", "pubsub": "unavailable"}
        ids = [new_id() for _ in range(3)]
        for invocation_id in ids:
            body = {"id": invocation_id, "input": {"default": {}}, "background": True}
            assert (await api.post(body))[0] == 202
    await until(lambda: db.all_match(ids, lambda r: r["status"] in TERMINAL), 60, "every run")
    assert {r["status"] for r in db.rows(ids).values()} == {"completed"}
