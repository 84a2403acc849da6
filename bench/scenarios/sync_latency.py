"""Sync latency: p50/p99 of sequential no-op sync invocations on an idle system, distributed
(1 gateway + 1 worker process) and embedded (``tether dev``), against one PostgreSQL round trip
plus one Redis publish → subscriber round trip measured from this process.

The distributed case runs once per ``worker.poll_timeout_ms`` in the sizes (100 is Tether's
default, 1000 Dramatiq's) to show whether an idle worker's poll interval leaks into latency.
"""

from __future__ import annotations

import time
import uuid

import psycopg
import redis.asyncio as aioredis

from bench.load import percentile, sync_latencies
from bench.procs import REDIS_URL, Database, launcher, private_database
from bench.report import Row
from bench.scenarios.common import Sizes

APP = "bench.apps:noop"


async def raw_round_trips(db: Database, count: int) -> list[float]:
    """Seconds of one ``SELECT 1`` plus one publish → receive, ``count`` times."""
    channel = f"tether-bench:{uuid.uuid4().hex}"
    out = []
    async with await psycopg.AsyncConnection.connect(db.url, autocommit=True) as conn:
        publisher = aioredis.Redis.from_url(REDIS_URL)
        subscriber = aioredis.Redis.from_url(REDIS_URL)
        pubsub = subscriber.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(channel)
        await pubsub.get_message(timeout=1.0)  # the subscribe confirmation
        try:
            for i in range(count):
                started = time.perf_counter()
                await conn.execute("SELECT 1")
                await publisher.publish(channel, str(i))
                while await pubsub.get_message(timeout=5.0) is None:
                    pass
                out.append(time.perf_counter() - started)
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
            await subscriber.aclose()
            await publisher.aclose()
    return out


def rows_for(
    label: str, samples: list[float], baseline: list[float], targets: dict[int, float]
) -> list[Row]:
    rows = []
    for q in (50, 99):
        value, base = percentile(samples, q) * 1000, percentile(baseline, q) * 1000
        limit = targets.get(q)
        rows.append(
            Row(
                scenario="sync",
                figure=f"p{q} ms, {label}",
                value=value,
                unit="ms",
                better="lower",
                baseline=base,
                baseline_label="1 PG + 1 pub/sub round trip",
                target=f"<= {limit:.0f} ms" if limit else "-",
                met=None if limit is None else value <= limit,
                details={"count": len(samples)},
            )
        )
    return rows


async def run(sizes: Sizes) -> list[Row]:
    rows: list[Row] = []
    with private_database() as db:
        for poll_ms in sizes.sync_poll_timeouts_ms:
            with launcher(db) as launch:
                env = {"TETHER_WORKER__POLL_TIMEOUT_MS": str(poll_ms)}
                launch.worker(APP, 1, sizes.worker_threads, extra=env)
                _, base = launch.gateway(APP, 1, extra=env)
                await sync_latencies(base, sizes.sync_warmup)
                baseline = await raw_round_trips(db, sizes.sync_count)
                samples = await sync_latencies(base, sizes.sync_count)
            rows += rows_for(f"distributed, poll {poll_ms} ms", samples, baseline, {50: 15, 99: 50})
        with launcher(db) as launch:
            _, base = launch.dev(APP)
            await sync_latencies(base, sizes.sync_warmup)
            baseline = await raw_round_trips(db, sizes.sync_count)
            samples = await sync_latencies(base, sizes.sync_count)
        rows += rows_for("embedded (tether dev)", samples, baseline, {50: 5})
    return rows
