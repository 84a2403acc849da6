"""Idle: what one worker process costs while nothing is queued, against Dramatiq alone.

A worker process (``bench.apps:noop``, ``worker_threads`` Dramatiq threads) starts on a private
database and queue and is left alone: after ``idle_settle`` s, over ``idle_seconds``, its CPU (in
cores), the Redis commands a second (the server's count, which also counts the commands inside
Dramatiq's Lua scripts and the bench's own two ``INFO`` calls: run it with nothing else on the
Redis server) and the PostgreSQL transactions it runs a second (``pg_stat_database`` of its
private database, read from the admin database so the reads do not count; a backend reports its
counts about once a second while it works, so each end of the window may be off by that much);
each of its threads' CPU is in the details. Then the same with ``worker.poll_timeout_ms`` at
1,000 (its consumers' fallback poll) and with ``timers.timer_poll`` at 1 s: the two settings
that price most of it.

Baseline: Dramatiq alone (``bench/bare_worker.py``: the same middleware and threads) idle on a
queue of its own over as long a window, at the same poll timeout. Dramatiq's consumer sleeps a
back-off of 50-100 % of that timeout between empty fetches, where Tether's waits for a wake-up
the whole timeout, so Dramatiq alone fetches somewhat more often.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass

from bench.procs import Database, Launcher, Proc, launcher, private_database, redis_commands
from bench.report import Row
from bench.scenarios.common import Sizes
from tests.procs import thread_cpu_seconds
from tether.settings import WorkerSettings

APP = "bench.apps:noop"
DEFAULT_POLL_MS = WorkerSettings().poll_timeout_ms
VARIANTS: dict[str, dict[str, str]] = {
    "defaults": {},
    "worker.poll_timeout_ms 1000": {"TETHER_WORKER__POLL_TIMEOUT_MS": "1000"},
    "timers.timer_poll 1 s": {"TETHER_TIMERS__TIMER_POLL": "1"},
}
"""The settings of each worker watched, as its environment."""


@dataclass(frozen=True)
class Idle:
    cores: float
    redis_per_s: float
    pg_per_s: float | None  # None: the process has no database (Dramatiq alone)
    threads: list[float]  # each thread's cores, largest first


@dataclass(frozen=True)
class Counters:
    at: float
    cpu: float
    redis: int
    transactions: int
    threads: dict[int, float]

    @classmethod
    def read(cls, proc: Proc, db: Database | None) -> Counters:
        threads = {tid: s for pid in proc.tree() for tid, s in thread_cpu_seconds(pid).items()}
        transactions = sum(db.stats()) if db is not None else 0
        return cls(time.monotonic(), proc.cpu_seconds(), redis_commands(), transactions, threads)


async def watch(proc: Proc, db: Database | None, sizes: Sizes) -> Idle:
    """``proc`` over ``idle_seconds``, after ``idle_settle``; ``db``: the database whose
    transactions count (None: none)."""
    await asyncio.sleep(sizes.idle_settle)
    before = Counters.read(proc, db)
    await asyncio.sleep(sizes.idle_seconds)
    after = Counters.read(proc, db)
    window = after.at - before.at
    per_thread = [(s - before.threads.get(tid, 0.0)) / window for tid, s in after.threads.items()]
    return Idle(
        (after.cpu - before.cpu) / window,
        (after.redis - before.redis) / window,
        (after.transactions - before.transactions) / window if db is not None else None,
        sorted(per_thread, reverse=True),
    )


async def dramatiq_alone(launch: Launcher, poll_timeout_ms: int, sizes: Sizes) -> Idle:
    """The baseline: Dramatiq's worker alone, idle, at ``poll_timeout_ms``."""
    proc = launch.bare_worker(1, sizes.worker_threads, poll_timeout_ms)
    try:
        return await watch(proc, None, sizes)
    finally:
        launch.stop(proc)


def rows(label: str, got: Idle, baseline: Idle, settings: dict[str, str]) -> list[Row]:
    """A worker's figures with ``settings``, beside Dramatiq alone's at the same poll."""
    details = {
        "settings": settings,
        "threads_cores": [round(c, 4) for c in got.threads],
        "baseline_threads_cores": [round(c, 4) for c in baseline.threads],
    }
    poll = settings.get("TETHER_WORKER__POLL_TIMEOUT_MS", str(DEFAULT_POLL_MS))
    row = functools.partial(Row, scenario="idle", better="lower", details=details)
    beside = functools.partial(row, baseline_label=f"Dramatiq alone, poll {poll} ms")
    figure = f"idle worker process, {label}"
    out = [
        beside(figure=f"{figure}: CPU", value=got.cores, unit="cores", baseline=baseline.cores),
        beside(
            figure=f"{figure}: Redis commands/s",
            value=got.redis_per_s,
            unit="/s",
            baseline=baseline.redis_per_s,
        ),
    ]
    if got.pg_per_s is not None:
        out.append(
            row(figure=f"{figure}: PostgreSQL transactions/s", value=got.pg_per_s, unit="/s")
        )
    return out


async def run(sizes: Sizes) -> list[Row]:
    """Each variant on a private database and queue; Dramatiq alone once per poll timeout."""
    out: list[Row] = []
    baselines: dict[str, Idle] = {}
    for label, settings in VARIANTS.items():
        poll = settings.get("TETHER_WORKER__POLL_TIMEOUT_MS", str(DEFAULT_POLL_MS))
        with private_database() as db, launcher(db) as launch:
            if poll not in baselines:
                baselines[poll] = await dramatiq_alone(launch, int(poll), sizes)
            proc = launch.worker(APP, 1, sizes.worker_threads, extra=settings)
            got = await watch(proc, db, sizes)
        out += rows(label, got, baselines[poll], settings)
    return out
