"""Caps: ``caps_starts`` no-op starts across ``caps_tenants`` tenants, each with a random
``max_active`` (1..``caps_max``, the same every run) and a global cap (``caps_global``), on 2
worker processes; then, from the store alone, whether running attempts ever exceeded a cap.

The invocations are written in bulk (rows and messages, as ``drain`` does), their tenants in a
random order, before the workers start. Every attempt is read back from the event log: from its
``run.started``/``run.resumed`` event to its terminal or park event (or the invocation's next
start), on the database clock; a sweep over those points counts the starts that took a tenant,
or everyone, over the cap (see :func:`bench.scenarios.tenancy.sweep` for why an end sorts
before a start at the same instant).

The baseline is the same work with no caps set, in the same run: its starts/s, and how many of
its starts would have broken the caps (how much the caps had to hold back).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

from bench.procs import Database, launcher, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Queue, Sizes
from bench.scenarios.tenancy import (
    attempts,
    db_now,
    insert_queued,
    set_limits,
    starts_per_second,
    sweep,
)
from tether.worker.dramatiq_redis import RUN_INVOCATION

APP = "bench.apps:noop"
PROCESSES = 2
SEED = 12


def finish(pg: Pg, total: int, deadline: float) -> int:
    """Wait until ``total`` invocations ended, or ``deadline`` seconds; how many did. The check
    holds for whatever ran, so running out of time is a figure (in the details), not a failure."""
    ended = "SELECT count(*) FROM tether_invocations WHERE status IN ('completed', 'failed')"
    end = time.monotonic() + deadline
    while time.monotonic() < end and int(pg.scalar(ended)) < total:
        time.sleep(0.2)
    failed = pg.count("failed")
    if failed:
        raise RuntimeError(f"{failed} invocations failed")
    return int(pg.scalar(ended))


@dataclass
class Phase:
    rate: float
    violations: int
    global_violations: int
    details: dict[str, Any]


def phase(db: Database, sizes: Sizes, caps: dict[str, int | None], global_cap: int | None) -> Phase:
    rng = random.Random(SEED)
    tenants = list(caps)
    share, rest = divmod(sizes.caps_starts, len(tenants))
    counts = {t: share + (1 if k < rest else 0) for k, t in enumerate(tenants)}
    pg = Pg(db)
    pg.conn.execute("TRUNCATE tether_invocations, tether_events")
    with launcher(db) as launch:
        queue = Queue(launch.queue)
        try:
            ids = insert_queued(pg, counts)
            rng.shuffle(ids)  # the tenants' messages in a random order
            written = db_now(pg)
            queue.enqueue_many(RUN_INVOCATION, ids)
            enqueue_s = db_now(pg) - written
            launch.worker(APP, PROCESSES, sizes.worker_threads)
            finished = finish(pg, sizes.caps_starts, sizes.deadline)
            found = attempts(pg)
            overlap = sweep(found, caps, global_cap)
            details = {
                "starts": len(found),
                "finished_in_deadline": finished,
                "tenants": counts,
                "peak_running": overlap.peak,
                "global_peak_running": overlap.global_peak,
                "first_violations": overlap.first,
                "enqueue_s": enqueue_s,
            }
            return Phase(
                starts_per_second(found), overlap.violations, overlap.global_violations, details
            )
        finally:
            queue.close()
            pg.close()


async def run(sizes: Sizes) -> list[Row]:
    rng = random.Random(SEED)
    caps: dict[str, int | None] = {
        f"caps-{k}": rng.randint(1, sizes.caps_max) for k in range(sizes.caps_tenants)
    }
    with private_database() as db:
        free = phase(db, sizes, caps, sizes.caps_global)  # nothing set: what the caps must stop
        await set_limits(db, {t: {"max_active": c} for t, c in caps.items()}, sizes.caps_global)
        capped = phase(db, sizes, caps, sizes.caps_global)
    details = {
        "caps": caps,
        "global_cap": sizes.caps_global,
        "worker_processes": PROCESSES,
        "threads": sizes.worker_threads,
        "capped": {**capped.details, "global_violations": capped.global_violations},
        "uncapped": {
            **free.details,
            "would_violate": free.violations,
            "would_violate_global": free.global_violations,
        },
    }
    done = capped.details["finished_in_deadline"]
    short = "" if done >= sizes.caps_starts else f" ({done:,} ended in {sizes.deadline:.0f} s)"
    where = f"{sizes.caps_starts:,} starts{short}, {len(caps)} tenants, global {sizes.caps_global}"
    violations = capped.violations + capped.global_violations
    return [
        Row(
            scenario="caps",
            figure=f"cap breaches (tenant + global), {where}",
            value=float(violations),
            unit="",
            better="lower",
            baseline=float(free.violations + free.global_violations),
            baseline_label="same caps, none set",
            target="0",
            met=violations == 0,
            details=details,
        ),
        Row(
            scenario="caps",
            figure=f"starts/s with caps, {where}",
            value=capped.rate,
            unit="/s",
            better="higher",
            baseline=free.rate,
            baseline_label="no caps set",
            details=details,
        ),
    ]
