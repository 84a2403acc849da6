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
waits that long after any). Figures, on the database clock from the first accept: the seconds
until all are finished (quiet against the baseline, medians), when the reaper analyzed, and how
many of the burst the unchecked database finished in the baseline's median time (it is stopped
then).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

from bench.load import owner_headers
from bench.peer_load import INVOCATIONS, post_body
from bench.procs import Database, launcher, private_database
from bench.raw_http import request_client
from bench.report import Row
from bench.scenarios.common import Pg, Sizes, poll
from bench.scenarios.tenancy import insert_queued
from tether.store.planner_statistics import MIN_GAP_S

APP = "bench.apps:sleeper"
BURST_OWNER = "bench-%"  # owner_headers' owners; the finished rows' are quiet-*
KINDS = ("baseline", "quiet", "unchecked")


@dataclass(frozen=True)
class Window:
    posting_s: float
    span_s: float | None  # first accept -> last finish; None: not all finished when stopped
    finished_within: int  # finished within the cutoff asked for (all, when there was none)
    analyzed_after_s: float | None  # the table's last ANALYZE, if during the burst
    believed_queued: float  # the planner's estimate of queued rows before the burst


def prepare(db: Database, sizes: Sizes, expect_backlog: bool) -> None:
    pg = Pg(db)
    try:
        pg.conn.execute("ALTER TABLE tether_invocations SET (autovacuum_enabled = off)")
        pg.conn.execute(
            "INSERT INTO tether_invocations (id, owner, tenant, input, request_hash, status,"
            " created_at, enqueued_at, started_at, finished_at)"
            " SELECT 'done-' || g, 'quiet-' || (g %% 300), 'quiet-' || (g %% 300), '{}', 'prefill',"
            " 'completed', 1, 1, 1, 2 FROM generate_series(1, %s) AS g",
            (sizes.quiet_finished,),
        )
        if expect_backlog:
            share = max(1, sizes.window_posts // 256)
            insert_queued(pg, {f"expected-{k:03d}": share for k in range(256)}, returning=False)
        pg.conn.execute("VACUUM ANALYZE tether_invocations")
        if expect_backlog:  # the statistics keep the backlog; the rows go
            pg.conn.execute("DELETE FROM tether_invocations WHERE status = 'queued'")
            pg.conn.execute("VACUUM tether_invocations")
            pg.recount_open()
    finally:
        pg.close()


def believed_queued(pg: Pg) -> float:
    plan = pg.scalar(
        "EXPLAIN (FORMAT JSON) SELECT 1 FROM tether_invocations WHERE status = 'queued'"
    )
    return float((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]["Plan Rows"])


def wait_past_last_analyze(pg: Pg) -> None:
    """Until the setup's ``ANALYZE`` is :data:`MIN_GAP_S` old (and a second more)."""
    age = pg.scalar(
        "SELECT extract(epoch from now() - greatest(last_analyze, last_autoanalyze))"
        " FROM pg_stat_user_tables WHERE relname = 'tether_invocations'"
    )
    if age is not None and float(age) < MIN_GAP_S + 1:
        time.sleep(MIN_GAP_S + 1 - float(age))


async def post_burst(base: str, sizes: Sizes) -> float:
    """Seconds to post the burst: ``concurrency`` loops, the owners cycling as in ``peer``."""
    todo = iter(enumerate(str(uuid.uuid4()) for _ in range(sizes.window_posts)))
    data = {"seconds": sizes.window_handler_s}
    started = time.perf_counter()
    async with request_client(base, sizes.concurrency) as http:

        async def loop() -> None:
            for i, invocation_id in todo:
                body = post_body(invocation_id, data, background=True)
                answer = await http.request("POST", INVOCATIONS, body, owner_headers(i))
                if answer.status != 202:
                    raise RuntimeError(f"POST answered {answer.status}")

        await asyncio.gather(*(loop() for _ in range(sizes.concurrency)))
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


def burst_window(pg: Pg) -> tuple[float, float | None]:
    """Seconds from the first accept to the last finish, and to the table's last ``ANALYZE``
    (None when that was before the first accept)."""
    row = pg.conn.execute(
        "SELECT max(finished_at) - min(created_at),"
        " extract(epoch from (SELECT greatest(last_analyze, last_autoanalyze)"
        " FROM pg_stat_user_tables WHERE relname = 'tether_invocations')) - min(created_at)"
        " FROM tether_invocations WHERE owner LIKE %s",
        (BURST_OWNER,),
    ).fetchone()
    assert row is not None and row[0] is not None
    analyzed = float(row[1]) if row[1] is not None and float(row[1]) > 0 else None
    return float(row[0]), analyzed


async def run_one(sizes: Sizes, kind: str, stop_after: float | None) -> Window:
    """One database's burst; ``stop_after``: stop waiting that many seconds after the first
    POST and count what finished within them."""
    with private_database() as db, launcher(db) as launch:
        prepare(db, sizes, expect_backlog=kind == "baseline")
        extra = {"TETHER_WORKER__CONCURRENCY": str(sizes.window_slots)}
        if kind == "unchecked":
            extra["TETHER_TIMERS__STATISTICS_CHECK"] = "0"
        launch.worker(APP, 1, sizes.worker_threads, extra)
        _, base = launch.gateway(APP, 1)
        pg = Pg(db)
        try:
            believed = believed_queued(pg)
            wait_past_last_analyze(pg)
            began = time.monotonic()
            posting = await post_burst(base, sizes)
            if stop_after is None:
                poll(
                    lambda: finished_of_burst(pg) >= sizes.window_posts,
                    sizes.deadline,
                    f"{sizes.window_posts} finished invocations",
                    0.05,
                )
                span, analyzed = burst_window(pg)
                return Window(posting, span, sizes.window_posts, analyzed, believed)
            await asyncio.sleep(max(0.0, stop_after - (time.monotonic() - began)) + 1.0)
            within = finished_of_burst(pg, stop_after)
            done = finished_of_burst(pg) >= sizes.window_posts
            span, analyzed = burst_window(pg)
            return Window(posting, span if done else None, within, analyzed, believed)
        finally:
            pg.close()


async def run(sizes: Sizes) -> list[Row]:
    windows: dict[str, list[Window]] = {kind: [] for kind in KINDS}
    for k in range(sizes.window_rounds):  # ABBA...: a slow minute of the machine hits both
        order = ("baseline", "quiet") if k % 2 == 0 else ("quiet", "baseline")
        for kind in order:
            windows[kind].append(await run_one(sizes, kind, None))
    spans = {kind: [w.span_s for w in windows[kind] if w.span_s is not None] for kind in KINDS}
    base_span = statistics.median(spans["baseline"])
    windows["unchecked"].append(await run_one(sizes, "unchecked", base_span))
    unchecked = windows["unchecked"][0]
    analyzed = [w.analyzed_after_s for w in windows["quiet"] if w.analyzed_after_s is not None]
    details: dict[str, Any] = {kind: [vars(w) for w in found] for kind, found in windows.items()}
    details.update(
        finished=sizes.quiet_finished,
        posts=sizes.window_posts,
        slots=sizes.window_slots,
        handler_s=sizes.window_handler_s,
    )
    burst = f"{sizes.window_posts:,} posted after a quiet spell"
    return [
        Row(
            scenario="quietwindow",
            figure=f"s from the first accept until all {burst} finished",
            value=statistics.median(spans["quiet"]),
            unit="s",
            better="lower",
            baseline=base_span,
            baseline_label="statistics expecting a backlog",
            details=details,
        ),
        Row(
            scenario="quietwindow",
            figure="s from the first accept until the reaper's ANALYZE (check every 2 s)",
            value=statistics.median(analyzed) if analyzed else float("nan"),
            unit="s",
            better="lower",
            details=details,
        ),
        Row(
            scenario="quietwindow",
            figure="of the burst, finished in the baseline's time with the check off",
            value=float(unchecked.finished_within),
            unit="",
            better="higher",
            baseline=float(sizes.window_posts),
            baseline_label="all of them (the baseline's)",
            details=details,
        ),
    ]
