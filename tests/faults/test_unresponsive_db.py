"""PostgreSQL stops answering one worker without an error (a partition, a hung server, a
fail-over that leaves its connections half-open): its heartbeat statement hangs rather than
fails. The worker must still stop its attempts once they go stale, as when PostgreSQL refuses
it (docs/operations.md, "a worker cannot reach PostgreSQL for stale_after"), so they do not run
beside the replacements another worker makes.

Nor may a gateway's request, or any other use of the store, wait for it as long as the operating
system keeps the connection: each checkout of a connection has a deadline
(``timers.store_deadline``), past which it is given up as a lost one.

The worker (or the store) reaches the test's database through a TCP proxy this test starts and
freezes; the shared PostgreSQL is never touched.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from tests.client import new_id
from tests.faults.conftest import MakeCluster, ProxyTo
from tests.faults.harness_ext import (
    STALE_AFTER,
    Db,
    api_for,
    assert_clean_events,
    attempts_started,
    holding,
    log_has,
    start_workers,
    until,
)
from tests.store import rows
from tether.store.store import Store, StoreUnavailable

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


async def test_a_worker_whose_database_stops_answering_stops_its_attempts_itself(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, proxy_to: ProxyTo
) -> None:
    proxied_url, proxy = proxy_to(fresh_db)
    cluster = make_cluster(fresh_db, redis_url)
    cut_off = make_cluster(proxied_url, redis_url)
    cut_off.queue = cluster.queue
    _, base = cluster.start_gateway()
    [worker] = start_workers(cut_off, 1)
    db = Db(fresh_db)
    ids = [new_id() for _ in range(2)]
    async with api_for(base) as api:
        for invocation_id in ids:
            spec = {"default": {"emit": 100, "emit_sleep": 0.2}}  # 20 s of ticks
            body = {"id": invocation_id, "input": spec, "background": True}
            assert (await api.post(body))[0] == 202
        await until(lambda: db.all_match(ids, holding(2)), 30, "the runs on the cut-off worker")
        start_workers(cluster, 1)  # a worker that still reaches the database: it replaces them

        proxy.send_signal(signal.SIGSTOP)  # the cut-off worker's statements hang from now on
        await until(lambda: log_has(worker, "no heartbeat for"), STALE_AFTER + 5, "it to give up")
        await until(
            lambda: worker.log().count("stopped without finishing (superseded)") == len(ids),
            5,
            "its attempts to stop while the database is still out of its reach",
        )
        proxy.send_signal(signal.SIGCONT)

        await until(
            lambda: db.all_match(ids, lambda r: r["status"] == "completed"), 60, "every run"
        )
        for invocation_id in ids:
            events = db.events(invocation_id)
            assert_clean_events(events)
            assert attempts_started(events) == [1, 2], invocation_id


HANG_GUARD = 60.0
"""How long a test waits for what the deadline must end within about a second: only so that,
without it, the test fails rather than hangs (nothing is timed)."""


async def test_a_checkout_past_its_deadline_is_given_up_and_the_pool_recovers(
    fresh_db: str, proxy_to: ProxyTo
) -> None:
    proxied_url, proxy = proxy_to(fresh_db)
    store = Store.postgres(proxied_url, pool_size=1, deadline=3.0)  # > idleping.PING_WITHIN
    try:
        first = rows.new()
        assert (await store.accept(first)).created
        assert (await store.get(first.id)) is not None  # its connections are pooled

        proxy.send_signal(signal.SIGSTOP)  # their statements now hang, and so would new ones'
        async with asyncio.timeout(HANG_GUARD):
            with pytest.raises(StoreUnavailable, match="no answer from PostgreSQL within 3 s"):
                await store.get(first.id)  # a pooled connection: no answer
            with pytest.raises(StoreUnavailable, match="no connection from PostgreSQL within 3 s"):
                await store.accept(rows.new())  # the writer: its idle ping, then a new one
        proxy.send_signal(signal.SIGCONT)

        row = await store.get(first.id)  # the given-up connections replaced
        assert row is not None and row.status == "queued"
    finally:
        proxy.send_signal(signal.SIGCONT)
        await store.close()


async def test_a_gateway_whose_database_stops_answering_answers_503_and_recovers(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, proxy_to: ProxyTo
) -> None:
    proxied_url, proxy = proxy_to(fresh_db)
    cluster = make_cluster(proxied_url, redis_url, TETHER_TIMERS__STORE_DEADLINE="3")
    gateway, base = cluster.start_gateway()
    async with api_for(base, request_limit=HANG_GUARD) as api:
        invocation_id = new_id()
        body = {"id": invocation_id, "input": {}, "background": True}
        assert (await api.post(body))[0] == 202

        proxy.send_signal(signal.SIGSTOP)
        status, answer = await api.get(invocation_id)
        assert status == 503 and answer["error"]["code"] == "overloaded", answer
        status, answer = await api.post({"id": new_id(), "input": {}, "background": True})
        assert status == 503 and answer["error"]["code"] == "overloaded", answer
        assert log_has(gateway, "from PostgreSQL within 3 s (timers.store_deadline)")
        proxy.send_signal(signal.SIGCONT)

        status, answer = await api.get(invocation_id)
        assert status == 200 and answer["status"] == "queued", answer  # no worker: queued
