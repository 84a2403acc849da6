"""Quiet spell, end to end: a burst posted through a gateway to a database analyzed while nothing
was queued, drained by a real worker whose reaper checks the planner's statistics, against the
same burst on a database whose statistics expect a backlog; and the same burst with the check
off, for what it saves.

``quietspell`` measures one claim before and after the check in one process. This measures the
window a deployment lives through: until the worker's reaper runs ``ANALYZE``
(``timers.statistics_check``, every 2 s), its claims are planned as if nothing were queued.

A private database per burst, each holding ``quiet_finished`` finished invocations:

- **baseline**: analyzed with ``window_posts`` queued over 256 tenants beside them, which are
  then deleted (plain ``VACUUM``, no ``ANALYZE``): the planner expects a backlog;
- **quiet**: analyzed with nothing queued (a quiet spell), the check on (the default);
- **unchecked**: the same quiet spell, ``TETHER_TIMERS__STATISTICS_CHECK=0`` (what a worker did
  before the thirty-first session).

``window_rounds`` bursts each on a baseline's and a quiet spell's database, alternating (ABBA:
a slow minute of the machine slows both), then one unchecked. Each burst: 1 gateway + 1 worker
process (``window_slots`` slots, fewer than the gateway's pace, so that a backlog builds; the
``sleeper`` app awaiting ``window_handler_s``), then ``window_posts`` background invocations
posted at c=32 by 256 owners, at least :data:`MIN_GAP_S` after the setup's ``ANALYZE`` (the check
waits that long after any). Figures, on the database clock from the first accept: how many
finished in the first ``window_early_s`` (the window itself: the check comes within it), the
seconds until all are finished (quiet against the baseline, medians), when the reaper analyzed,
and how many of the burst the unchecked database finished in the baseline's median time (it is
stopped then).
"""

from __future__ import annotations

import functools
import json
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

from bench.peer_load import post_all
from bench.procs import Database, launcher, private_database
from bench.raw_http import request_client
from bench.report import Row
from bench.scenarios.common import Pg, Sizes, poll
from bench.scenarios.tenancy import insert_queued
from tether.store.planner_statistics import MIN_GAP_S

APP = "bench.apps:sleeper"
BURST_OWNER = "bench-%"  # owner_headers' owners; the finished rows' are quiet-*


@dataclass(frozen=True)
class Window:
    posting_s: float
    early: int  # finished within the first ``window_early_s``
    span_s: float | None  # first accept -> last finish; None: not all finished when stopped
    finished_within: int  # finished within the cutoff asked for (all, when there was none)
    analyzes: int  # ANALYZEs of the table during the burst
    analyzed_after_s: float | None  # the last of them, seconds after the first accept
    believed_queued: float  # the planner's estimate of queued rows before the burst


def window_database(db: Database, sizes: Sizes, expect_backlog: bool) -> None:
    """Finished rows analyzed with nothing queued (a quiet spell), or, if ``expect_backlog``,
    beside ``window_posts`` queued that are then deleted without a new ``ANALYZE``."""
    pg = Pg(db)
    try:
        pg.conn.execute("ALTER TABLE tether_invocations SET (autovacuum_enabled = off)")
        pg.prefill_finished(sizes.quiet_finished)
        if expect_backlog:
            share, rest = divmod(sizes.window_posts, 256)
            counts = {f"expected-{k:03d}": share + (1 if k < rest else 0) for k in range(256)}
            insert_queued(pg, counts, returning=False)
        pg.conn.execute("VACUUM ANALYZE tether_invocations")
        if expect_backlog:  # the statistics keep the backlog; the rows go
            pg.conn.execute("DELETE FROM tether_invocations WHERE status = 'queued'")
            pg.conn.execute("VACUUM tether_invocations")
            pg.recount_open()
    finally:
        pg.close()


def believed_queued(pg: Pg) -> float:
    """The planner's estimate of the queued invocations."""
    plan = pg.scalar(
        "EXPLAIN (FORMAT JSON) SELECT 1 FROM tether_invocations WHERE status = 'queued'"
    )
    return float((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]["Plan Rows"])


@dataclass(frozen=True)
class Analyzed:
    """The table's ``ANALYZE`` statistics (anyone's: this scenario's, a reaper's, autovacuum's),
    on the database clock."""

    count: int
    last_at: float | None  # epoch seconds
    age_s: float | None


def analyzed(pg: Pg) -> Analyzed:
    row = pg.conn.execute(
        "SELECT analyze_count + autoanalyze_count,"
        " extract(epoch from greatest(last_analyze, last_autoanalyze)),"
        " extract(epoch from now() - greatest(last_analyze, last_autoanalyze))"
        " FROM pg_stat_user_tables WHERE relname = 'tether_invocations'"
    ).fetchone()
    assert row is not None
    count, at, age = row
    return Analyzed(
        int(count), None if at is None else float(at), None if age is None else float(age)
    )


def wait_past_last_analyze(pg: Pg) -> None:
    """Until the setup's ``ANALYZE`` is :data:`MIN_GAP_S` old (and a second more)."""
    age = analyzed(pg).age_s
    if age is not None and age < MIN_GAP_S + 1:
        time.sleep(MIN_GAP_S + 1 - age)


async def post_burst(base: str, sizes: Sizes) -> float:
    """Seconds to post the burst at ``concurrency``, the owners cycling as in ``peer``."""
    ids = [str(uuid.uuid4()) for _ in range(sizes.window_posts)]
    started = time.perf_counter()
    async with request_client(base, sizes.concurrency) as http:
        answers = await post_all(
            http,
            ids,
            sizes.concurrency,
            started + sizes.deadline,
            {"seconds": sizes.window_handler_s},
        )
    if answers != {202: sizes.window_posts}:
        raise RuntimeError(f"unexpected answers while posting: {dict(answers)}")
    return time.perf_counter() - started


def finished_of_burst(pg: Pg, within: float | None = None) -> int:
    """The burst's completed invocations; ``within``: only those finished within that many
    seconds of its first accept."""
    sql = "SELECT count(*) FROM tether_invocations WHERE owner LIKE %s AND status = 'completed'"
    if within is None:
        return int(pg.scalar(sql, BURST_OWNER) or 0)
    first = "(SELECT min(created_at) FROM tether_invocations WHERE owner LIKE %s)"
    return int(
        pg.scalar(f"{sql} AND finished_at - {first} <= %s", BURST_OWNER, BURST_OWNER, within) or 0
    )


def burst_span(pg: Pg) -> tuple[float, float]:
    """The burst's first accept (epoch s, database clock), and the seconds from it to its last
    finish."""
    row = pg.conn.execute(
        "SELECT min(created_at), max(finished_at) - min(created_at) FROM tether_invocations"
        " WHERE owner LIKE %s",
        (BURST_OWNER,),
    ).fetchone()
    assert row is not None and row[0] is not None and row[1] is not None
    return float(row[0]), float(row[1])


async def run_one(sizes: Sizes, kind: str, stop_after: float | None) -> Window:
    """One burst on a database of its own (``kind``: baseline, quiet or unchecked);
    ``stop_after``: stop waiting that many seconds after the first POST, counting what
    finished within them."""
    with private_database() as db, launcher(db) as launch:
        window_database(db, sizes, expect_backlog=kind == "baseline")
        extra = {"TETHER_WORKER__CONCURRENCY": str(sizes.window_slots)}
        if kind == "unchecked":
            extra["TETHER_TIMERS__STATISTICS_CHECK"] = "0"
        launch.worker(APP, 1, sizes.worker_threads, extra)
        _, base = launch.gateway(APP, 1)
        pg = Pg(db)
        try:
            believed = believed_queued(pg)
            wait_past_last_analyze(pg)
            before = analyzed(pg).count
            began = time.monotonic()
            posting = await post_burst(base, sizes)
            wait = sizes.deadline if stop_after is None else stop_after
            poll(
                lambda: (
                    finished_of_burst(pg) >= sizes.window_posts
                    or time.monotonic() - began > wait + 1
                ),
                sizes.deadline + 2,
                f"{sizes.window_posts} finished invocations",
                0.5,  # the figures are the rows' own times: a poll only says when to look
            )
            done = finished_of_burst(pg) >= sizes.window_posts
            if stop_after is None and not done:
                raise TimeoutError(f"the {kind} burst did not finish in {sizes.deadline:.0f} s")
            first, span = burst_span(pg) if done else (0.0, 0.0)
            after = analyzed(pg)
            since = None if after.last_at is None or not done else after.last_at - first
            return Window(
                posting_s=posting,
                early=finished_of_burst(pg, sizes.window_early_s),
                span_s=span if done else None,
                finished_within=finished_of_burst(pg, stop_after),
                analyzes=after.count - before,
                analyzed_after_s=since if since is not None and since > 0 else None,
                believed_queued=believed,
            )
        finally:
            pg.close()


async def run(sizes: Sizes) -> list[Row]:
    windows: dict[str, list[Window]] = {"baseline": [], "quiet": [], "unchecked": []}
    for k in range(sizes.window_rounds):  # ABBA...: a slow minute of the machine slows both
        order = ("baseline", "quiet") if k % 2 == 0 else ("quiet", "baseline")
        for kind in order:
            windows[kind].append(await run_one(sizes, kind, None))
    spans = {kind: [w.span_s or 0.0 for w in windows[kind]] for kind in ("baseline", "quiet")}
    early = {kind: [float(w.early) for w in windows[kind]] for kind in ("baseline", "quiet")}
    base_span = statistics.median(spans["baseline"])
    unchecked = await run_one(sizes, "unchecked", base_span)
    windows["unchecked"].append(unchecked)
    quiet = windows["quiet"]
    analyzed_after = [w.analyzed_after_s for w in quiet if w.analyzed_after_s is not None]
    details: dict[str, Any] = {kind: [vars(w) for w in found] for kind, found in windows.items()}
    details.update(
        finished=sizes.quiet_finished,
        posts=sizes.window_posts,
        slots=sizes.window_slots,
        handler_s=sizes.window_handler_s,
    )
    burst = f"{sizes.window_posts:,} posted after a quiet spell"
    label = "statistics expecting a backlog"
    row = functools.partial(Row, scenario="quietwindow", details=details)
    return [
        row(
            figure=f"of {burst}, finished in the first {sizes.window_early_s:.0f} s (median)",
            value=statistics.median(early["quiet"]),
            unit="",
            better="higher",
            baseline=statistics.median(early["baseline"]),
            baseline_label=label,
        ),
        row(
            figure=f"s from the first accept until all {burst} finished (median)",
            value=statistics.median(spans["quiet"]),
            unit="s",
            better="lower",
            baseline=base_span,
            baseline_label=label,
        ),
        row(
            figure=(
                f"s from the first accept until the reaper's ANALYZE (median; analyzed in"
                f" {len(analyzed_after)} of {len(quiet)} bursts)"
            ),
            value=statistics.median(analyzed_after) if analyzed_after else float("nan"),
            unit="s",
            better="lower",
        ),
        row(
            figure="of the burst, finished in the baseline's time with the check off",
            value=float(unchecked.finished_within),
            unit="",
            better="higher",
            baseline=float(sizes.window_posts),
            baseline_label="all of them (the baseline's)",
        ),
    ]
