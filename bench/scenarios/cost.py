"""Cost per no-op invocation, end to end (background POST → completed), 1 gateway + 1 worker:
PostgreSQL transactions (``pg_stat_database`` commit and rollback deltas on the private
database) and CPU seconds of the worker and the gateway process trees.

Everything the processes do in the window counts, reaper passes included. PostgreSQL publishes a
backend's counters at most once a second, so each snapshot is taken after a short settle.
"""

from __future__ import annotations

import asyncio

from bench.load import post_background
from bench.procs import launcher, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Sizes

APP = "bench.apps:noop"
STATS_SETTLE = 2.5  # > PostgreSQL's PGSTAT_MIN_INTERVAL (1 s) between a backend's reports


async def run(sizes: Sizes) -> list[Row]:
    n = sizes.cost_invocations
    with private_database() as db, launcher(db) as launch:
        pg = Pg(db)
        try:
            worker = launch.worker(APP, 1, sizes.worker_threads)
            gateway, base = launch.gateway(APP, 1)
            warm = min(50, n)
            await post_background(base, warm, sizes.concurrency)
            pg.wait_completed(warm, sizes.deadline)
            await asyncio.sleep(STATS_SETTLE)
            commits0, rollbacks0 = db.stats()
            worker0, gateway0 = worker.cpu_seconds(), gateway.cpu_seconds()
            await post_background(base, n, sizes.concurrency)
            pg.wait_completed(warm + n, sizes.deadline)
            worker1, gateway1 = worker.cpu_seconds(), gateway.cpu_seconds()
            await asyncio.sleep(STATS_SETTLE)
            commits1, rollbacks1 = db.stats()
        finally:
            pg.close()
    commits, rollbacks = (commits1 - commits0) / n, (rollbacks1 - rollbacks0) / n
    details = {"invocations": n, "settle_s": STATS_SETTLE}
    return [
        Row(scenario="cost", figure="PG commits per no-op invocation", value=commits, unit="",
            better="lower", target="<= 4", met=commits <= 4, details=details),
        Row(scenario="cost", figure="PG rollbacks (read-only txns) per invocation", value=rollbacks,
            unit="", better="lower", details=details),
        Row(scenario="cost", figure="worker CPU ms per invocation", value=(worker1 - worker0) / n * 1000,
            unit="ms", better="lower", details=details),
        Row(scenario="cost", figure="gateway CPU ms per invocation", value=(gateway1 - gateway0) / n * 1000,
            unit="ms", better="lower", details=details),
    ]
