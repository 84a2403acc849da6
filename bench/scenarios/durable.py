"""Durable execution on 1 gateway + 1 worker process: what a parked invocation costs, how fast an
input resumes it, and how punctually a durable timer fires.

1. Parking. N invocations each park on ``ctx.wait_for_input`` (background POSTs). Figures: the
   worker slots they hold once all are ``waiting`` (active rows and rows naming a worker: the
   runtime frees an attempt's slot as it parks, so a row in neither state holds none; the
   worker's log must also say ``parked`` N times), and PostgreSQL bytes per parked invocation
   (``pg_total_relation_size`` deltas, indexes and TOAST included, of ``tether_invocations``,
   ``tether_waits`` and ``tether_events``; the input is ``{"wait": true}``, so there is no
   handler state to exclude), as written and after ``VACUUM FULL`` (dead row versions that
   autovacuum reclaims). Baseline: the same tables' bytes per completed no-op invocation,
   measured the same way in the same run, and no-ops completed/s beside parks/s.
2. Resume latency. With the N parked, K of them one after another: open the events stream
   (``after`` its last cursor), POST the input, and time POST -> the ``run.resumed`` frame.
   Baseline: a sync no-op POST on the same processes, interleaved sample by sample.
3. Timer punctuality. T invocations each ``ctx.sleep(S)`` (parked: ``inline_sleep_max`` is
   lowered), posted at an even pace over a few seconds while the N are still parked. Figure:
   ``run.resumed``'s time minus the sleep's ``wake_at``, both on the database clock. Baseline:
   the poll interval ``timers.timer_poll``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.load import percentile, post_background, session
from bench.procs import Proc, launcher, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Sizes, poll

APP = "bench.apps:parker"
TABLES = ("tether_invocations", "tether_waits", "tether_events")
TIMER_POLL = 0.25
ENV = {"TETHER_TIMERS__INLINE_SLEEP_MAX": "0.5", "TETHER_TIMERS__TIMER_POLL": str(TIMER_POLL)}
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Footprint:
    """Bytes per invocation in the durable tables, and the rate the invocations got there."""

    as_written: float
    compacted: float
    per_table_written: dict[str, float]
    per_table_compacted: dict[str, float]
    rate: float


def table_bytes(pg: Pg) -> dict[str, int]:
    return {t: int(pg.scalar("SELECT pg_total_relation_size(%s::regclass)", t)) for t in TABLES}


async def footprint(pg: Pg, base: str, n: int, spec: Any, status: str, sizes: Sizes) -> Footprint:
    """Post ``n`` invocations of ``spec`` on empty tables, wait until all are ``status``."""
    pg.conn.execute("TRUNCATE tether_invocations, tether_events, tether_waits, tether_steps")
    before = table_bytes(pg)
    started = time.perf_counter()
    await post_background(base, n, sizes.concurrency, spec)
    poll(lambda: pg.count(status) >= n, sizes.deadline, f"{n} {status} invocations", 0.05)
    rate = n / (time.perf_counter() - started)
    written = table_bytes(pg)
    pg.conn.execute(f"VACUUM FULL {', '.join(TABLES)}")
    compacted = table_bytes(pg)
    return Footprint(
        as_written=sum(written[t] - before[t] for t in TABLES) / n,
        compacted=sum(compacted[t] - before[t] for t in TABLES) / n,
        per_table_written={t: (written[t] - before[t]) / n for t in TABLES},
        per_table_compacted={t: (compacted[t] - before[t]) / n for t in TABLES},
        rate=rate,
    )


def slots_held(pg: Pg, worker: Proc, n: int) -> tuple[int, dict[str, int]]:
    """Worker slots the parked invocations hold: rows active or naming a worker (none once the
    attempts parked), after checking the worker's log says every one of them parked."""
    poll(lambda: worker.log().count("parked; waiting") >= n, 30, f"the worker to log {n} parks")
    parked_lines = worker.log().count("parked; waiting")
    active = int(pg.scalar("SELECT count(*) FROM tether_invocations WHERE status = 'active'"))
    holding = int(pg.scalar("SELECT count(*) FROM tether_invocations WHERE worker IS NOT NULL"))
    return active + holding, {"active": active, "naming_a_worker": holding, "parks": parked_lines}


async def resume_once(http: aiohttp.ClientSession, base: str, row: tuple[str, str, int]) -> float:
    """Seconds from POSTing the input to the resumed run's first event on an open stream."""
    invocation_id, owner, last = row
    headers = {**JSON, "X-Forwarded-User": owner}
    url = f"{base}/api/invocations/{invocation_id}"
    async with http.get(f"{url}/events", params={"after": str(last)}, headers=headers) as stream:

        async def send_input() -> int:
            body = {"wait": "go", "value": 1}
            async with http.post(f"{url}/input", json=body, headers=headers) as answer:
                await answer.read()
                return answer.status

        started = time.perf_counter()
        posting = asyncio.create_task(send_input())
        try:
            async for raw in stream.content:
                if raw.startswith(b"event: run.resumed"):
                    return time.perf_counter() - started
            raise RuntimeError(f"{invocation_id}: the stream ended without run.resumed")
        finally:
            status = await posting
            if status != 200:
                raise RuntimeError(f"input answered {status}")


async def sync_noop(http: aiohttp.ClientSession, base: str) -> float:
    body = {"id": str(uuid.uuid4()), "input": {}}
    headers = {**JSON, "X-Forwarded-User": "bench-sync"}
    started = time.perf_counter()
    async with http.post(f"{base}/api/invocations", json=body, headers=headers) as r:
        await r.read()
        if r.status != 200:
            raise RuntimeError(f"sync no-op answered {r.status}")
    return time.perf_counter() - started


async def resume_latencies(pg: Pg, base: str, k: int) -> tuple[list[float], list[float]]:
    rows = pg.conn.execute(
        "SELECT id, owner, last_event_id FROM tether_invocations WHERE status = 'waiting'"
        " ORDER BY seq LIMIT %s",
        (k,),
    ).fetchall()
    if len(rows) < k:
        raise RuntimeError(f"only {len(rows)} parked invocations to resume")
    resumed, baseline = [], []
    async with session(4) as http:
        for _ in range(5):  # warm connections and code paths
            await sync_noop(http, base)
        for invocation_id, owner, last in rows:
            resumed.append(await resume_once(http, base, (invocation_id, owner, int(last))))
            baseline.append(await sync_noop(http, base))
    return resumed, baseline


async def timer_lags(pg: Pg, base: str, sizes: Sizes) -> list[float]:
    """``run.resumed`` minus ``wake_at`` (database clock) for paced durable sleeps."""
    count, pace = sizes.timers, sizes.timer_spread / max(1, sizes.timers)
    ids = [str(uuid.uuid4()) for _ in range(count)]
    async with session(1) as http:
        for i, invocation_id in enumerate(ids):
            body = {"id": invocation_id, "input": {"sleep": sizes.timer_sleep}, "background": True}
            headers = {**JSON, "X-Forwarded-User": f"bench-timer-{i % 16}"}
            async with http.post(f"{base}/api/invocations", json=body, headers=headers) as r:
                await r.read()
                if r.status != 202:
                    raise RuntimeError(f"timer post answered {r.status}")
            await asyncio.sleep(pace)
    done = "SELECT count(*) FROM tether_invocations WHERE id = ANY(%s) AND status = 'completed'"
    poll(lambda: int(pg.scalar(done, ids)) >= count, sizes.deadline, "the timers", 0.1)
    rows = pg.conn.execute(
        "SELECT e.created_at - w.wake_at FROM tether_waits w JOIN tether_events e"
        " ON e.invocation_id = w.invocation_id AND e.type = 'run.resumed'"
        " WHERE w.kind = 'sleep' AND w.invocation_id = ANY(%s)",
        (ids,),
    ).fetchall()
    if len(rows) != count:
        raise RuntimeError(f"{len(rows)} of {count} sleeps parked and resumed")
    return [float(r[0]) for r in rows]


def storage_rows(n: int, parked: Footprint, noop: Footprint, slots: int, why: Any) -> list[Row]:
    details = {
        "parked_per_table_written": parked.per_table_written,
        "parked_per_table_compacted": parked.per_table_compacted,
        "noop_per_table_written": noop.per_table_written,
        "noop_per_table_compacted": noop.per_table_compacted,
    }
    rows = [
        Row(
            scenario="durable",
            figure=f"worker slots held by {n:,} parked",
            value=slots,
            unit="",
            better="lower",
            target="0",
            met=slots == 0,
            details=why,
        ),
        Row(
            scenario="durable",
            figure=f"parked/s, {n:,} background posts",
            value=parked.rate,
            unit="/s",
            better="higher",
            baseline=noop.rate,
            baseline_label="no-ops completed/s",
        ),
    ]
    for label, value, base in (
        ("as written", parked.as_written, noop.as_written),
        ("after VACUUM FULL", parked.compacted, noop.compacted),
    ):
        rows.append(
            Row(
                scenario="durable",
                figure=f"PG bytes per parked invocation, {label}",
                value=value,
                unit="B",
                better="lower",
                baseline=base,
                baseline_label="per completed no-op",
                target="<= 2048 B",
                met=value <= 2048,
                details=details,
            )
        )
    return rows


def latency_rows(resumed: list[float], sync: list[float], lags: list[float]) -> list[Row]:
    rows = []
    for q, limit in ((50, 20.0), (99, 100.0)):
        value = percentile(resumed, q) * 1000
        rows.append(
            Row(
                scenario="durable",
                figure=f"input -> run.resumed p{q} ms, {len(resumed)} resumes",
                value=value,
                unit="ms",
                better="lower",
                baseline=percentile(sync, q) * 1000,
                baseline_label="sync no-op POST",
                target=f"<= {limit:.0f} ms",
                met=value <= limit,
            )
        )
    for q in (50, 99):
        value = percentile(lags, q) * 1000
        rows.append(
            Row(
                scenario="durable",
                figure=f"timer wake_at -> run.resumed p{q} ms, {len(lags)} sleeps",
                value=value,
                unit="ms",
                better="lower",
                baseline=TIMER_POLL * 1000,
                baseline_label="timers.timer_poll",
                target="<= 1000 ms" if q == 99 else "-",
                met=value <= 1000 if q == 99 else None,
                details={"max_ms": max(lags) * 1000},
            )
        )
    return rows


async def run(sizes: Sizes) -> list[Row]:
    n = sizes.parked_invocations
    with private_database() as db, launcher(db) as launch:
        pg = Pg(db)
        try:
            worker = launch.worker(APP, 1, sizes.worker_threads, extra=ENV)
            _, base = launch.gateway(APP, 1, extra=ENV)
            noop = await footprint(pg, base, n, {}, "completed", sizes)
            parked = await footprint(pg, base, n, {"wait": True}, "waiting", sizes)
            slots, why = slots_held(pg, worker, n)
            resumed, sync = await resume_latencies(pg, base, sizes.resume_samples)
            lags = await timer_lags(pg, base, sizes)
        finally:
            pg.close()
    return storage_rows(n, parked, noop, slots, why) + latency_rows(resumed, sync, lags)
