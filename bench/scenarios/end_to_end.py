"""End to end: completed/s while a client posts background no-ops continuously, gateway and
workers sharing the machine, against the bare accept handler feeding bare Dramatiq no-op workers
in the same layout.

Completions are counted at the end of a warm-up and at the end of the run; the figure is the
difference over the time between the two counts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from bench.load import Poster
from bench.procs import launcher, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Queue, Sizes

APP = "bench.apps:noop"
GATEWAYS, WORKERS = 1, 1


async def completion_rate(base: str, completed: Callable[[Poster], int], sizes: Sizes) -> float:
    poster = Poster(base, sizes.concurrency)
    posting = asyncio.create_task(poster.run(duration=sizes.e2e_warmup + sizes.e2e_seconds))
    await asyncio.sleep(sizes.e2e_warmup)  # the load runs meanwhile; this only times the sample
    first, first_at = completed(poster), time.perf_counter()
    await posting
    last, last_at = completed(poster), time.perf_counter()
    poster.check()
    return (last - first) / (last_at - first_at)


async def run(sizes: Sizes) -> list[Row]:
    with private_database() as db:
        with launcher(db) as launch:
            queue = Queue(launch.queue)
            launch.bare_worker(WORKERS, sizes.worker_threads)
            _, base = launch.bare_gateway(GATEWAYS)
            try:
                baseline = await completion_rate(
                    base, lambda p: p.posted - queue.unfinished(), sizes
                )
            finally:
                queue.close()
        with launcher(db) as launch:
            pg = Pg(db)
            launch.worker(APP, WORKERS, sizes.worker_threads)
            _, base = launch.gateway(APP, GATEWAYS)
            try:
                value = await completion_rate(base, lambda p: pg.count("completed"), sizes)
            finally:
                pg.close()
    return [
        Row(
            scenario="e2e",
            figure=(
                f"completed/s, posting for {sizes.e2e_seconds:.0f}s, "
                f"{GATEWAYS} gw + {WORKERS} worker proc"
            ),
            value=value,
            unit="/s",
            better="higher",
            baseline=baseline,
            baseline_label="bare handler -> bare Dramatiq",
            target=">= 60%",
            met=value >= 0.6 * baseline,
            details={"seconds": sizes.e2e_seconds, "gateways": GATEWAYS, "workers": WORKERS},
        )
    ]
