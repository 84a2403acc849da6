"""Drain: completed/s for N already-queued no-op invocations, against Dramatiq alone draining N
no-op messages with the same processes and threads.

The queue is filled before the workers start; the clock runs from the first message taken to
the last one finished, so worker boot time is not counted. Tether's span comes from the database
(first ``started_at`` → last ``finished_at``); Dramatiq's from polling its unacknowledged
messages every 20 ms (its no-op actor records nothing).
"""

from __future__ import annotations

import time

from bench.baselines import BARE_ACTOR
from bench.procs import Database, launcher, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Queue, Sizes, poll
from tether.worker.dramatiq_redis import RUN_INVOCATION

APP = "bench.apps:noop"


def bare_rate(db: Database, processes: int, sizes: Sizes) -> float:
    n = sizes.drain_messages
    with launcher(db) as launch:
        queue = Queue(launch.queue)
        try:
            queue.enqueue_many(BARE_ACTOR, [f"bare-{i}" for i in range(n)])
            launch.bare_worker(processes, sizes.worker_threads)
            poll(lambda: queue.unfinished() < n, sizes.deadline, "the first bare message")
            started = time.perf_counter()
            poll(lambda: queue.unfinished() == 0, sizes.deadline, "Dramatiq to drain")
            return n / (time.perf_counter() - started)
        finally:
            queue.close()


def tether_rate(db: Database, processes: int, sizes: Sizes) -> float:
    n = sizes.drain_messages
    pg = Pg(db)
    pg.conn.execute("TRUNCATE tether_invocations, tether_events")
    with launcher(db) as launch:
        queue = Queue(launch.queue)
        try:
            queue.enqueue_many(RUN_INVOCATION, pg.prefill(n))
            launch.worker(APP, processes, sizes.worker_threads)
            pg.wait_completed(n, sizes.deadline)
            return n / pg.span("started_at", "finished_at")
        finally:
            queue.close()
            pg.close()


async def run(sizes: Sizes) -> list[Row]:
    rows = []
    with private_database() as db:
        for processes in sizes.process_counts:
            baseline = bare_rate(db, processes, sizes)
            value = tether_rate(db, processes, sizes)
            rows.append(
                Row(
                    scenario="drain",
                    figure=f"completed/s, {sizes.drain_messages:,} queued, {processes} worker proc",
                    value=value,
                    unit="/s",
                    better="higher",
                    baseline=baseline,
                    baseline_label="Dramatiq alone",
                    target=">= 50%",
                    met=value >= 0.5 * baseline,
                    details={
                        "messages": sizes.drain_messages,
                        "processes": processes,
                        "threads": sizes.worker_threads,
                    },
                )
            )
    return rows
