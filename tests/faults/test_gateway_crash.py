"""A gateway SIGKILLed mid-stream: the client resumes on another gateway and misses nothing."""

from __future__ import annotations

import contextlib
import signal

import aiohttp
import pytest

from tests.client import Api, SseEvent, assert_clean_log, new_id, read_sse
from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import api_for, start_workers

pytestmark = [pytest.mark.faults, pytest.mark.timeout(90)]


async def read_into(
    response: aiohttp.ClientResponse, out: list[SseEvent], limit: int | None = None
) -> None:
    await read_sse(response, limit, out)


async def test_a_client_resumes_on_a_second_gateway_after_the_first_is_killed_mid_stream(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url)
    doomed, first_base = cluster.start_gateway()
    _, second_base = cluster.start_gateway()
    start_workers(cluster, 1)
    invocation_id = new_id()
    body = {
        "id": invocation_id,
        "input": {"default": {"emit": 10, "emit_sleep": 0.3}},
        "stream": True,
    }
    received: list[SseEvent] = []
    async with api_for(first_base) as api:
        async with api.session.post(
            f"{first_base}/api/invocations", json=body, headers=api.headers
        ) as r:
            assert r.status == 200
            await read_into(r, received, limit=3)
            doomed.signal(signal.SIGKILL)
            with contextlib.suppress(aiohttp.ClientError):
                await read_into(r, received)  # whatever was already on the wire, then the break
        assert received and received[-1].type != "run.completed"
        last = received[-1].id

        elsewhere = Api(api.session, second_base, owner=api.owner)
        rest = await elsewhere.events(invocation_id, after=last)

    assert rest and rest[0].id == last + 1
    assert_clean_log(received + rest)
    assert [e.data["i"] for e in received + rest if e.type == "tick"] == list(range(10))
    assert rest[-1].type == "run.completed"
