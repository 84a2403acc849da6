"""Event streaming.

1. One invocation emits N events as fast as it can; a live SSE client (``stream: true``) reads
   them. Figures: events/s delivered to the client (POST → terminal event) and events/s stored
   (the run's ``started_at`` → ``finished_at``), against raw PostgreSQL inserts of rows of the
   same shape (one connection, 1,000 rows per transaction, the writer's largest batch).
2. S concurrent streams, each an invocation emitting a timestamped event every ``interval``
   seconds, the streams evenly out of step (stream i starts i/S of an interval late). Figure:
   emit -> client receive latency p50/p99 (the emit call in the handler to the SSE frame in the
   client, so it includes the durable write), against raw Redis pub/sub publish -> receive
   latency with S channels on one subscriber connection at the same pace.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import psycopg
import redis.asyncio as aioredis

from bench.load import Received, percentile, session, stream
from bench.procs import REDIS_URL, Database, launcher, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Sizes

APP = "bench.apps:emitter"
RAW_BATCH = 1000


async def raw_insert_rate(db: Database, count: int) -> float:
    data = json.dumps({"type": "tick", "i": 0, "t": time.time()})
    async with await psycopg.AsyncConnection.connect(db.url) as conn:
        await conn.execute("CREATE TEMP TABLE raw_events (LIKE tether_events INCLUDING ALL)")
        await conn.commit()
        started = time.perf_counter()
        for first in range(0, count, RAW_BATCH):
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO raw_events (invocation_id, cursor, type, data, created_at)"
                    " VALUES (%s, %s, %s, %s, extract(epoch from clock_timestamp()))",
                    [("raw", i, "tick", data) for i in range(first, min(first + RAW_BATCH, count))],
                )
            await conn.commit()
        return count / (time.perf_counter() - started)


async def raw_pubsub_latencies(streams: int, ticks: int, interval: float) -> list[float]:
    prefix = f"tether-bench:{uuid.uuid4().hex}:"
    publisher = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(REDIS_URL))
    subscriber = aioredis.Redis.from_url(REDIS_URL)
    pubsub = subscriber.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(*(f"{prefix}{i}" for i in range(streams)))
    latencies: list[float] = []
    expected = streams * ticks

    async def publish(i: int) -> None:
        await asyncio.sleep(i / streams * interval)  # out of step, as the streams are
        for _ in range(ticks):
            await asyncio.sleep(interval)
            await publisher.publish(f"{prefix}{i}", repr(time.time()))

    async def receive() -> None:
        while len(latencies) < expected:
            message = await pubsub.get_message(timeout=1.0)
            if message is not None:
                latencies.append(time.time() - float(message["data"]))

    try:
        await asyncio.wait_for(
            asyncio.gather(receive(), *(publish(i) for i in range(streams))),
            timeout=ticks * interval + 60,
        )
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
        await subscriber.aclose()
        await publisher.aclose()
    return latencies


async def one_big_stream(base: str, pg: Pg, count: int) -> tuple[float, float]:
    async with session(1) as http:
        started = time.perf_counter()
        events = await stream(http, base, {"events": count})
        delivered = time.perf_counter() - started
    ticks = sum(1 for e in events if e.type == "tick")
    if ticks != count or events[-1].type != "run.completed":
        raise RuntimeError(f"stream delivered {ticks} of {count} events, then {events[-1].type}")
    return count / delivered, count / pg.span("started_at", "finished_at")


async def many_streams(base: str, streams: int, ticks: int, interval: float) -> list[float]:
    latencies: list[float] = []

    def on_event(event: Received) -> None:
        if event.type == "tick":
            latencies.append(event.at - float(event.data["t"]))

    async with session(streams) as http:
        await asyncio.gather(
            *(
                stream(
                    http,
                    base,
                    {"events": ticks, "interval": interval, "offset": i / streams * interval},
                    i,
                    on_event,
                )
                for i in range(streams)
            )
        )
    if len(latencies) != streams * ticks:
        raise RuntimeError(f"received {len(latencies)} of {streams * ticks} ticks")
    return latencies


async def run(sizes: Sizes) -> list[Row]:
    n, s = sizes.stream_events, sizes.streams
    with private_database() as db, launcher(db) as launch:
        pg = Pg(db)
        try:
            launch.worker(
                APP,
                1,
                sizes.worker_threads,
                extra={"TETHER_WORKER__CONCURRENCY": str(max(200, 2 * s))},
            )
            _, base = launch.gateway(APP, 1)
            raw_rate = await raw_insert_rate(db, n)
            delivered, stored = await one_big_stream(base, pg, n)
            raw_latency = await raw_pubsub_latencies(s, sizes.stream_ticks, sizes.stream_interval)
            latency = await many_streams(base, s, sizes.stream_ticks, sizes.stream_interval)
        finally:
            pg.close()
    rows = [
        Row(
            scenario="stream",
            figure=f"events/s delivered to 1 SSE client, {n:,} events",
            value=delivered,
            unit="/s",
            better="higher",
            baseline=raw_rate,
            baseline_label=f"raw PG insert, {RAW_BATCH}/txn",
            target=">= 5000/s",
            met=delivered >= 5000,
        ),
        Row(
            scenario="stream",
            figure=f"events/s stored, {n:,} events",
            value=stored,
            unit="/s",
            better="higher",
            baseline=raw_rate,
            baseline_label=f"raw PG insert, {RAW_BATCH}/txn",
            target=">= 5000/s",
            met=stored >= 5000,
        ),
    ]
    for q in (50, 99):
        value, base_q = percentile(latency, q) * 1000, percentile(raw_latency, q) * 1000
        rows.append(
            Row(
                scenario="stream",
                figure=f"emit->receive p{q} ms, {s} streams x {sizes.stream_ticks} ticks",
                value=value,
                unit="ms",
                better="lower",
                baseline=base_q,
                baseline_label="raw Redis pub/sub",
                target="<= 50 ms" if q == 99 else "-",
                met=value <= 50 if q == 99 else None,
                details={"samples": len(latency)},
            )
        )
    return rows
