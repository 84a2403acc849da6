"""Cost per no-op invocation, end to end (background POST → completed), 1 gateway + 1 worker:
PostgreSQL transactions (``pg_stat_database`` commit and rollback deltas on the private
database) and CPU seconds of the worker and the gateway process trees.

Everything the processes do in the window counts, reaper passes and heartbeats included; the
bench's own polling queries (one autocommit transaction each) are subtracted. PostgreSQL
publishes a backend's counters at most once a second, so each snapshot follows a short settle.
"""

from __future__ import annotations

import asyncio

from bench.load import post_background
from bench.procs import cpu_seconds, launcher, pids_named, private_database, redis_commands
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
            probe = pg.conn.info.backend_pid
            backends = db.backend_pids() - {probe}
            server = pids_named("redis-server")
            worker0, gateway0, probes0 = worker.cpu_seconds(), gateway.cpu_seconds(), pg.queries
            backends0 = {pid: cpu_seconds(pid) for pid in backends}
            redis0, commands0 = sum(cpu_seconds(p) for p in server), redis_commands()
            await post_background(base, n, sizes.concurrency)
            pg.wait_completed(warm + n, sizes.deadline)
            worker1, gateway1, probes1 = worker.cpu_seconds(), gateway.cpu_seconds(), pg.queries
            backends |= db.backend_pids() - {probe}  # new ones started from zero
            postgres = sum(cpu_seconds(pid) - backends0.get(pid, 0.0) for pid in backends)
            redis1, commands1 = sum(cpu_seconds(p) for p in server), redis_commands()
            await asyncio.sleep(STATS_SETTLE)
            commits1, rollbacks1 = db.stats()
        finally:
            pg.close()
    # the bench's own polling queries are transactions too: not Tether's. A gateway's reads
    # autocommit since 2026-12-04 (each one a commit here); a worker's are transactions ended
    # by a rollback (again since 2026-12-05)
    commits = (commits1 - commits0 - (probes1 - probes0)) / n
    rollbacks = (rollbacks1 - rollbacks0) / n
    details = {"invocations": n, "settle_s": STATS_SETTLE}
    shared = {**details, "note": "the Redis server is shared: other clients count too"}
    return [
        Row(
            scenario="cost",
            figure="PG commits (writes and autocommit reads) per no-op invocation",
            value=commits,
            unit="",
            better="lower",
            target="<= 4",
            met=commits <= 4,
            details=details,
        ),
        Row(
            scenario="cost",
            figure="PG rollbacks per invocation",
            value=rollbacks,
            unit="",
            better="lower",
            details=details,
        ),
        Row(
            scenario="cost",
            figure="worker CPU ms per invocation",
            value=(worker1 - worker0) / n * 1000,
            unit="ms",
            better="lower",
            details=details,
        ),
        Row(
            scenario="cost",
            figure="gateway CPU ms per invocation",
            value=(gateway1 - gateway0) / n * 1000,
            unit="ms",
            better="lower",
            details=details,
        ),
        Row(
            scenario="cost",
            figure="PostgreSQL backend CPU ms per invocation",
            value=postgres / n * 1000,
            unit="ms",
            better="lower",
            details=details,
        ),
        Row(
            scenario="cost",
            figure="Redis server CPU ms per invocation (shared server)",
            value=(redis1 - redis0) / n * 1000,
            unit="ms",
            better="lower",
            details=shared,
        ),
        Row(
            scenario="cost",
            figure="Redis commands per invocation (shared server)",
            value=(commands1 - commands0) / n,
            unit="",
            better="lower",
            details=shared,
        ),
    ]
