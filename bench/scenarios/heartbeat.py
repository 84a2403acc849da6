"""Heartbeat: one worker's beat of its running attempts (``Store.heartbeat``, what a worker runs
every ``timers.heartbeat_interval``), against the same beat with the index on ``heartbeat_at``
that migration 0010 dropped, in the same run.

Two private databases, each with ``heartbeat_attempts`` active attempts among
``heartbeat_rows`` rows; the second gets the old index back. Beats alternate between them,
``heartbeat_rounds`` each. Figures: milliseconds per beat (median), and the share of the beats'
row updates PostgreSQL made HOT (heap-only: no index entry written, read from
``pg_stat_user_tables`` once the store's connections have closed and reported).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

from bench.procs import Database, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Sizes
from tether.store.store import Store

OLD_INDEX = (
    "CREATE INDEX tether_invocations_active_heartbeat"
    " ON tether_invocations (heartbeat_at) WHERE status = 'active'"
)
WORKER = "bench-worker"


@dataclass
class Beats:
    db: Database
    attempts: list[tuple[str, int]]
    store: Store
    seconds: list[float] = field(default_factory=list)
    updates: tuple[int, int] = (0, 0)

    async def beat(self) -> None:
        started = time.perf_counter()
        alive = await self.store.heartbeat(self.attempts)
        self.seconds.append(time.perf_counter() - started)
        if len(alive) != len(self.attempts):
            raise RuntimeError(f"beat {len(alive)} of {len(self.attempts)} attempts")


def prefill(pg: Pg, rows: int, active: int) -> list[tuple[str, int]]:
    """``rows`` invocations, the first ``active`` of them running under attempt 1."""
    pg.conn.execute(
        "INSERT INTO tether_invocations (id, owner, tenant, input, request_hash, status,"
        " attempt, worker, last_event_id, created_at, enqueued_at, started_at, heartbeat_at)"
        " SELECT 'hb-' || g, 'bench-' || (g %% 64), 'bench-' || (g %% 64), '{}'::jsonb, 'h',"
        " CASE WHEN g <= %s THEN 'active' ELSE 'completed' END, 1, %s, 0, now_s, now_s, now_s,"
        " CASE WHEN g <= %s THEN now_s END"
        " FROM generate_series(1, %s) AS g,"
        " LATERAL (SELECT extract(epoch FROM clock_timestamp()) AS now_s) AS clock",
        (active, WORKER, active, rows),
    )
    pg.conn.execute("VACUUM ANALYZE tether_invocations")
    return [(f"hb-{g}", 1) for g in range(1, active + 1)]


def updates(pg: Pg) -> tuple[int, int]:
    row = pg.conn.execute(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
        " WHERE relname = 'tether_invocations'"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def run(sizes: Sizes) -> list[Row]:
    with ExitStack() as stack:
        sides: list[Beats] = []
        pgs: list[Pg] = []
        for old_index in (False, True):
            db = stack.enter_context(private_database())
            pg = Pg(db)
            stack.callback(pg.close)
            if old_index:
                pg.conn.execute(OLD_INDEX)
            attempts = prefill(pg, sizes.heartbeat_rows, sizes.heartbeat_attempts)
            sides.append(Beats(db, attempts, Store.postgres(db.sqlalchemy_url, pool_size=1)))
            pgs.append(pg)
        for side in sides:  # a warm connection and prepared statements, as in a running worker
            for _ in range(6):
                await side.beat()
            side.seconds.clear()
        before = [updates(pg) for pg in pgs]
        for _ in range(sizes.heartbeat_rounds):
            for side in sides:
                await side.beat()
        for side in sides:
            await side.store.close()  # a closing backend reports its counters
        await asyncio.sleep(1.0)
        for side, pg, (upd0, hot0) in zip(sides, pgs, before, strict=True):
            upd1, hot1 = updates(pg)
            side.updates = (upd1 - upd0, hot1 - hot0)
    now, old = sides
    details = {
        "attempts": sizes.heartbeat_attempts,
        "rows": sizes.heartbeat_rows,
        "rounds": sizes.heartbeat_rounds,
        "updates_now": now.updates,
        "updates_with_index": old.updates,
    }
    return [
        Row(
            scenario="heartbeat",
            figure=f"ms per beat of {sizes.heartbeat_attempts} attempts (median)",
            value=statistics.median(now.seconds) * 1000,
            unit="ms",
            better="lower",
            baseline=statistics.median(old.seconds) * 1000,
            baseline_label="with an index on heartbeat_at",
            details=details,
        ),
        Row(
            scenario="heartbeat",
            figure="share of the beats' row updates that are HOT",
            value=hot_share(now.updates),
            unit="",
            better="higher",
            baseline=hot_share(old.updates),
            baseline_label="with an index on heartbeat_at",
            details=details,
        ),
    ]


def hot_share(counts: tuple[int, int]) -> float:
    total, hot = counts
    return hot / total if total else float("nan")
