"""Flood: one tenant's burst against another tenant's trickle, on one worker process running at
most ``flood_concurrency`` invocations at once (a handler sleeping ``flood_sleep`` seconds).

1. Idle system: tenant B posts ``flood_rate`` background invocations per second for
   ``flood_window`` seconds; accept → start p50/p99 (``started_at - created_at``, database
   clock) is the baseline.
2. Tenant A's ``flood_backlog`` invocations are queued at once (rows and messages written in
   bulk, as ``drain`` does: posting 50,000 through the gateway would take minutes of its own),
   with the same worker running. After a warm-up, A's completed/s alone over
   ``flood_a_window``.
3. B posts again at the same pace for ``flood_window``: B's accept → start p50/p99 and A's
   completed/s over that window; then A's completed/s alone over ``flood_a_window`` more. The
   throughput baseline is the mean of the windows before and after (drift hits both sides).
   B's invocations still not started after ``deadline`` count with the time they waited so
   far (the figures are then lower bounds; the row says so).

Owners are tenants; both post through the gateway's proxy-auth header from loopback.
"""

from __future__ import annotations

import asyncio

from bench.procs import launcher, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Queue, Sizes, poll
from bench.scenarios.tenancy import (
    PacedPoster,
    completed_between,
    db_now,
    insert_queued,
    wait_started,
    wait_summary,
    waits,
)
from tether.worker.dramatiq_redis import RUN_INVOCATION

APP = "bench.apps:sleeper"
A, B, B_IDLE, WARMUP = "flood-a", "flood-b", "flood-b-idle", "flood-warmup"


async def a_rate(pg: Pg, window: float) -> float:
    """A's completed/s over the next ``window`` seconds (database clock)."""
    start = db_now(pg)
    await asyncio.sleep(window)
    end = db_now(pg)
    return completed_between(pg, A, start, end) / (end - start)


async def run(sizes: Sizes) -> list[Row]:
    handler = {"seconds": sizes.flood_sleep}
    limits = {  # A's 50,000 open invocations are over the per-owner default (1,000)
        "TETHER_LIMITS__MAX_ACTIVE_PER_OWNER": "0",
        "TETHER_LIMITS__MAX_QUEUED": "0",
        "TETHER_WORKER__CONCURRENCY": str(sizes.flood_concurrency),
    }
    with private_database() as db, launcher(db) as launch:
        pg = Pg(db)
        queue = Queue(launch.queue)
        try:
            _, base = launch.gateway(APP, 1, limits)
            launch.worker(APP, 1, sizes.worker_threads, limits)
            rate, window = sizes.flood_rate, sizes.flood_window
            await PacedPoster(base, WARMUP, handler).run(rate * 4, sizes.flood_warmup)
            wait_started(pg, WARMUP, sizes.deadline)

            await PacedPoster(base, B_IDLE, handler).run(rate, window)
            wait_started(pg, B_IDLE, sizes.deadline)
            idle = wait_summary(*waits(pg, B_IDLE))

            queued_at = db_now(pg)
            queue.enqueue_many(RUN_INVOCATION, insert_queued(pg, {A: sizes.flood_backlog}, handler))
            queued_in = db_now(pg) - queued_at
            poll(
                lambda: completed_between(pg, A, 0, float("inf")) > 0,
                sizes.deadline,
                "A's first completion",
            )
            await asyncio.sleep(sizes.flood_warmup)
            before = await a_rate(pg, sizes.flood_a_window)

            with_from = db_now(pg)
            posted = await PacedPoster(base, B, handler).run(rate, window)
            with_to = db_now(pg)
            shared = completed_between(pg, A, with_from, with_to) / (with_to - with_from)
            a_left = int(
                pg.scalar(
                    "SELECT count(*) FROM tether_invocations WHERE tenant = %s"
                    " AND status = 'queued'",
                    A,
                )
            )
            after = await a_rate(pg, sizes.flood_a_window)
            all_started = wait_started(pg, B, sizes.deadline)
            flooded = wait_summary(*waits(pg, B))
        finally:
            queue.close()
            pg.close()

    details = {
        "a_backlog": sizes.flood_backlog,
        "a_written_in_bulk_s": queued_in,
        "a_queued_when_b_done": a_left,
        "a_alone_before_per_s": before,
        "a_alone_after_per_s": after,
        "b_posts": posted,
        "b_rate_per_s": rate,
        "window_s": window,
        "a_window_s": sizes.flood_a_window,
        "handler_sleep_s": sizes.flood_sleep,
        "worker_concurrency": sizes.flood_concurrency,
        "a_ideal_per_s": sizes.flood_concurrency / sizes.flood_sleep,
        "b_idle": idle,
        "b_flooded": flooded,
        "b_all_started": all_started,
    }
    bound = "" if all_started else " (lower bound: some had not started)"
    alone = (before + after) / 2
    p99_met = flooded["p99_ms"] <= 2 * idle["p99_ms"] and flooded["p99_ms"] < 250
    return [
        Row(
            scenario="flood",
            figure=f"B accept→start p99, A {sizes.flood_backlog:,} queued{bound}",
            value=flooded["p99_ms"],
            unit="ms",
            better="lower",
            baseline=idle["p99_ms"],
            baseline_label="B alone, idle",
            target="<= 2x and < 250 ms",
            met=p99_met and all_started,
            details=details,
        ),
        Row(
            scenario="flood",
            figure=f"B accept→start p50, A {sizes.flood_backlog:,} queued{bound}",
            value=flooded["p50_ms"],
            unit="ms",
            better="lower",
            baseline=idle["p50_ms"],
            baseline_label="B alone, idle",
            details=details,
        ),
        Row(
            scenario="flood",
            figure=f"A completed/s while B posts {rate:g}/s",
            value=shared,
            unit="/s",
            better="higher",
            baseline=alone,
            baseline_label="A alone, windows before and after",
            target=">= 90%",
            met=shared >= 0.9 * alone,
            details=details,
        ),
    ]
