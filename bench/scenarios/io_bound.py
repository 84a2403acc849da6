"""I/O-bound concurrency: N invocations that each await a simulated model call (asyncio.sleep)
on ONE worker process, against the ideal ``seconds x ceil(N / worker.concurrency)``.

The clock runs from the first POST to the last ``finished_at`` (posting included: it is what a
client sees). Peak RSS is the worker's VmHWM, beside its RSS when idle before the run.
"""

from __future__ import annotations

import math
import time

from bench.load import post_background
from bench.procs import launcher, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Sizes

APP = "bench.apps:sleeper"


async def run(sizes: Sizes) -> list[Row]:
    n, seconds, setting = sizes.io_invocations, sizes.io_seconds, sizes.io_concurrency_setting
    ideal = seconds * math.ceil(n / setting)
    with private_database() as db, launcher(db) as launch:
        pg = Pg(db)
        try:
            worker = launch.worker(
                APP, 1, sizes.worker_threads, extra={"TETHER_WORKER__CONCURRENCY": str(setting)}
            )
            _, base = launch.gateway(APP, 1)
            idle_rss = worker.peak_rss_mb()
            started = time.time()
            poster = await post_background(base, n, sizes.concurrency, {"seconds": seconds})
            pg.wait_completed(n, sizes.deadline)
            last = float(pg.scalar("SELECT max(finished_at) FROM tether_invocations"))
            elapsed = last - started
            peak_rss = worker.peak_rss_mb()
        finally:
            pg.close()
    details = {
        "invocations": n,
        "seconds_each": seconds,
        "concurrency_setting": setting,
        "posting_s": poster.elapsed,
    }
    return [
        Row(
            scenario="io",
            figure=f"seconds for {n:,} x {seconds:g}s sleeps, 1 worker proc",
            value=elapsed,
            unit="s",
            better="lower",
            baseline=ideal,
            baseline_label=f"ideal at concurrency {setting}",
            target="<= 8 s" if n >= 2000 else "-",
            met=elapsed <= 8 if n >= 2000 else None,
            details=details,
        ),
        Row(
            scenario="io",
            figure=f"worker peak RSS, {n:,} concurrent",
            value=peak_rss,
            unit="MB",
            better="lower",
            baseline=idle_rss,
            baseline_label="same worker, idle",
            details=details,
        ),
    ]
