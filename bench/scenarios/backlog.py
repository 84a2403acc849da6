"""Backlog: accept/s and claim/s with ``backlog_queued`` invocations queued, against an empty
system in the same run.

Two private databases side by side: one empty, one holding ``backlog_queued`` queued rows
across ``backlog_tenants`` tenants, one of them ``backlog_dominant`` of the rows (written in
bulk with one ``INSERT ... SELECT``, then ``VACUUM ANALYZE``; no Dramatiq messages for them).
Each has its own gateway (``limits.max_queued`` raised above the backlog, else it would answer
503) and, later, its own worker (1 process, no-op handler; ``timers.requeue_after`` a day and
``timers.broker_check`` off, so nothing re-sends the backlog's missing messages).

- accept/s: ``backlog_posts`` background posts at concurrency ``concurrency``, as ``accept``
  measures it; median of ``backlog_rounds`` rounds alternating between the two systems.
- claim/s: the worker then drains what was posted (the warm-up and every round); attempts
  started per second over as many claims as were posted, first ``started_at`` → last, on the
  database clock, whichever rows they took (a fair claim may start backlog rows for those
  messages: a claim is a claim).

Every statement the gateway and the worker ran that reads or changes queued invocations (the
claim among them) is recorded with one call's parameters (``bench/claim_capture.py``) and
``EXPLAIN (ANALYZE, BUFFERS)``'d afterwards on each database, in a transaction rolled back; the
plans are in the row details.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from bench import claim_capture
from bench.load import post_background
from bench.procs import ROOT, Database, Launcher, launcher, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Sizes, poll
from bench.scenarios.tenancy import insert_queued

APP = "bench.apps:noop"
QUIET = {"TETHER_TIMERS__REQUEUE_AFTER": "86400", "TETHER_TIMERS__BROKER_CHECK": "0"}
DOMINANT = "backlog-big"


def backlog_counts(sizes: Sizes) -> dict[str, int]:
    big = round(sizes.backlog_queued * sizes.backlog_dominant)
    others = max(1, sizes.backlog_tenants - 1)
    share, rest = divmod(sizes.backlog_queued - big, others)
    counts = {DOMINANT: big}
    counts.update({f"backlog-{k}": share + (1 if k < rest else 0) for k in range(others)})
    return counts


def captured_env(launch: Launcher, role: str, extra: dict[str, str]) -> dict[str, str]:
    """Environment that loads :mod:`bench.claim_capture` into every process of ``role``."""
    site = launch.workdir / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(claim_capture.SITECUSTOMIZE)
    return {
        **extra,
        "PYTHONPATH": f"{site}{os.pathsep}{ROOT}",
        "TETHER_BENCH_CAPTURE": str(launch.workdir / role),
    }


def claim_rate(db: Database, launch: Launcher, sizes: Sizes) -> tuple[float, int]:
    """(attempts started/s, how many) while one worker drains what the gateway accepted: as
    many claims as were posted, whichever rows they took, first start → last."""
    pg = Pg(db)
    try:
        posted = int(
            pg.scalar("SELECT count(*) FROM tether_invocations WHERE request_hash <> 'prefill'")
        )
        launch.worker(APP, 1, sizes.worker_threads, captured_env(launch, "worker", QUIET))
        # counted from the event log, as large on both sides: a count over the invocations
        # would scan the backlog's 500,000 rows 20 times a second beside the claims it measures
        started = "SELECT count(*) FROM tether_events WHERE type = 'run.started'"
        poll(lambda: int(pg.scalar(started)) >= posted, sizes.deadline, "the claims", 0.1)
        rows = pg.conn.execute(
            "SELECT started_at FROM tether_invocations WHERE started_at IS NOT NULL"
            " ORDER BY started_at LIMIT %s",
            (posted,),
        ).fetchall()
        span = float(rows[-1][0]) - float(rows[0][0])
        return ((posted - 1) / span if span > 0 else float("nan")), posted
    finally:
        pg.close()


def explain(db: Database, launch: Launcher, role: str) -> list[dict[str, Any]]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of each statement captured in ``role``'s processes, in a
    transaction rolled back."""
    pg = Pg(db)
    plans = []
    try:
        for sample in claim_capture.read(launch.workdir / role):
            try:
                with pg.conn.transaction(force_rollback=True):
                    lines = pg.conn.execute(
                        "EXPLAIN (ANALYZE, BUFFERS) " + sample["statement"],
                        sample["parameters"],
                    ).fetchall()
                plan = [str(r[0])[: claim_capture.LONGEST_LINE] for r in lines]
            except Exception as exc:  # a statement that cannot be replayed: say why
                plan = [f"not replayable: {type(exc).__name__}: {exc}"]
            plans.append(
                {
                    "role": role,
                    "calls": sample["calls"],
                    "seconds_in_calls": sample["seconds"],
                    "statement": sample["shape"],
                    "plan": plan,
                }
            )
    finally:
        pg.close()
    return plans


async def run(sizes: Sizes) -> list[Row]:
    counts = backlog_counts(sizes)
    limits = {**QUIET, "TETHER_LIMITS__MAX_QUEUED": str(10 * sizes.backlog_queued + 100_000)}
    with private_database() as empty, private_database() as full:
        pg = Pg(full)
        try:
            started = time.perf_counter()
            insert_queued(pg, counts, returning=False)
            pg.conn.execute("VACUUM ANALYZE tether_invocations")
            pg.conn.execute("CHECKPOINT")  # the setup's writes are flushed before measuring
            written_s = time.perf_counter() - started
            table_mb = pg.scalar("SELECT pg_total_relation_size('tether_invocations')") / 2**20
        finally:
            pg.close()
        with launcher(empty) as idle, launcher(full) as busy:
            _, idle_base = idle.gateway(APP, 1, captured_env(idle, "gateway", limits))
            _, busy_base = busy.gateway(APP, 1, captured_env(busy, "gateway", limits))
            for base in (idle_base, busy_base):
                await post_background(base, sizes.accept_warmup, sizes.concurrency)
            baselines: list[float] = []
            values: list[float] = []
            for _ in range(sizes.backlog_rounds):  # alternating, so noise hits both alike
                for base, into in ((idle_base, baselines), (busy_base, values)):
                    poster = await post_background(base, sizes.backlog_posts, sizes.concurrency)
                    into.append(poster.posted / poster.elapsed)
            # the accept's statements on the data they ran on: before the workers change it
            plans = {"empty": explain(empty, idle, "gateway")}
            plans["backlog"] = explain(full, busy, "gateway")
            claim_idle, claimed_idle = claim_rate(empty, idle, sizes)
            claim_busy, claimed_busy = claim_rate(full, busy, sizes)
            plans["empty"] += explain(empty, idle, "worker")
            plans["backlog"] += explain(full, busy, "worker")
    accept_idle, accept_busy = statistics.median(baselines), statistics.median(values)
    details = {
        "queued": sizes.backlog_queued,
        "tenants": len(counts),
        "dominant_tenant_rows": counts[DOMINANT],
        "written_and_analyzed_s": written_s,
        "invocations_table_mb": table_mb,
        "posts": sizes.backlog_posts,
        "accept_rounds": values,
        "accept_baseline_rounds": baselines,
        "claimed": claimed_busy,
        "claimed_baseline": claimed_idle,
        "plans": plans,
    }
    where = f"{sizes.backlog_queued:,} queued ({len(counts)} tenants)"
    return [
        Row(
            scenario="backlog",
            figure=f"accepted/s, {where}, c={sizes.concurrency}",
            value=accept_busy,
            unit="/s",
            better="higher",
            baseline=accept_idle,
            baseline_label="empty system",
            target=">= 80%",
            met=accept_busy >= 0.8 * accept_idle,
            details=details,
        ),
        Row(
            scenario="backlog",
            figure=f"claimed/s, {where}, 1 worker proc",
            value=claim_busy,
            unit="/s",
            better="higher",
            baseline=claim_idle,
            baseline_label="empty system",
            target=">= 80%",
            met=claim_busy >= 0.8 * claim_idle,
            details=details,
        ),
    ]
