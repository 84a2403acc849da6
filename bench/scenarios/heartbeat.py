"""Heartbeat: one worker's beat of its running attempts (``Store.heartbeat``, what a worker runs
every ``timers.heartbeat_interval``), against the same beat with the index on ``heartbeat_at``
that migration 0010 dropped, in the same run.

Two private databases, each with ``heartbeat_attempts`` active attempts among
``heartbeat_rows`` rows; the second gets the old index back. Beats alternate between them,
``heartbeat_rounds`` each. Figures: milliseconds per beat (median), and the share of the beats'
row updates PostgreSQL made HOT (heap-only: no index entry written), read from
``pg_stat_user_tables`` around the measured beats (each side's store connects for them alone:
a closing backend reports its counters, an idle one may not for 10 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator
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
STATS_SETTLE = 1.5  # a closed backend's counters are in the shared statistics by then


@dataclass
class Beats:
    db: Database
    attempts: list[tuple[str, int]]
    store: Store | None = None
    seconds: list[float] = field(default_factory=list)
    updates: tuple[int, int] = (0, 0)

    @contextlib.asynccontextmanager
    async def connected(self) -> AsyncIterator[None]:
        """A store on one connection; its backend reports its counters as it closes."""
        self.store = Store.postgres(self.db.sqlalchemy_url, pool_size=1)
        try:
            yield
        finally:
            await self.store.close()
            self.store = None

    async def beat(self) -> None:
        assert self.store is not None
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
            sides.append(Beats(db, attempts))
            pgs.append(pg)
        for side in sides:  # the first beats after the prefill's VACUUM meet full pages: unmeasured
            async with side.connected():
                for _ in range(6):
                    await side.beat()
        await asyncio.sleep(STATS_SETTLE)  # the warm-up's connections have closed and reported
        before = [updates(pg) for pg in pgs]
        for side in sides:
            side.seconds.clear()
        async with sides[0].connected(), sides[1].connected():  # a fresh connection's first
            for _ in range(sizes.heartbeat_rounds):  # beat prepares: the median leaves it out
                for side in sides:
                    await side.beat()
        await asyncio.sleep(STATS_SETTLE)
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
