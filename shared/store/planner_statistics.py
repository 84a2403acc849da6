"""The planner's picture of the invocations, analyzed again when an open status outgrows it.

A claim finds its rows through the partial indexes on statuses, and the planner picks among
them by how many rows it believes each status holds, from the table's statistics. ``ANALYZE``
takes those (autovacuum's, once a tenth of the table has changed since the last one), and a
status's share swings from none to most of the table within minutes: a burst queues
thousands, the workers drain them. Statistics taken while nothing was queued say nothing is,
and the planner then reads every queued row's index entry once per tenant with queued work
(the claim's scan for them, :mod:`tether.store.candidates`) and per tenant it starts: 3.3 s a
claim of 32 at 50,000 queued over 256 tenants, against 10 ms with the backlog analyzed
(``bench quietspell``), until autovacuum's next ``ANALYZE``, which on a table of millions of
finished invocations can be a long backlog away, and never where autovacuum is off.

So every worker's reaper, each ``timers.statistics_check``, asks the planner how many rows it
believes each open status holds (an ``EXPLAIN`` of each) and counts each status's rows up to
what would prove that belief far too low: :data:`FACTOR` times it, and at least :data:`FLOOR`
rows (fewer are cheap whatever the plan). A status believed to hold :data:`CEILING` rows or more
is not counted: the planner already takes it for a large set. When one holds that many, the
process runs ``ANALYZE tether_invocations`` (it reads a sample of the table, not all of it;
one process at a time, under a transaction advisory lock). An ``ANALYZE`` that leaves a belief
still that far off (a status too rare in a huge table for the sample to find) makes the next
wait twice as long, up to :data:`MAX_GAP_S`.

``ANALYZE`` needs the table's owner, the database's, or a superuser; a role that is none of them
is told once, in the log, what to run instead (docs/operations.md, "Vacuum").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa

from tether.status import OPEN
from tether.store.connection import Connection
from tether.store.engine import Database

log = logging.getLogger(__name__)

FLOOR = 1_000
"""Rows of a status below which no plan of the claim's is slow, whatever the planner believes."""
FACTOR = 10
"""How many times the planner's belief a status must hold for it to count as far too low."""
CEILING = 10_000
"""A belief from which a status is not counted: the planner already plans for a large set (and
the count, bounded by ``FACTOR`` times the belief, would read that many index entries)."""
MIN_GAP_S = 10.0
"""Least seconds between two ``ANALYZE`` runs of one process."""
MAX_GAP_S = 600.0
"""Most seconds the gap doubles to while ``ANALYZE`` does not fix what the planner believes."""
ANALYZE_LOCK_KEY = 0x7E7E_0003
"""The transaction advisory lock one process at a time analyzes under."""

_PERMITTED = sa.text(
    "SELECT pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE') "
    "FROM pg_class AS c, pg_database AS d "
    "WHERE c.oid = to_regclass('tether_invocations') AND d.datname = current_database()"
)


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A status the planner believes holds ``believed`` rows, of which at least ``counted``
    were found."""

    status: str
    believed: float
    counted: int


@dataclass(frozen=True, slots=True)
class StatisticsCheck:
    """What one check found and did."""

    short: list[Shortfall] = field(default_factory=list)
    analyzed: bool = False
    permitted: bool = True
    seconds: float = 0.0
    """How long the ``ANALYZE`` took."""


def count_up_to(believed: float) -> int | None:
    """How many of a status's rows to count to show that a belief of ``believed`` rows is far
    too low; None: not counted (believed large already)."""
    if believed >= CEILING:
        return None
    return max(FLOOR, int(FACTOR * believed))


class PlannerStatistics:
    """One process's checks of one database (PostgreSQL; the embedded store has nothing to
    check: SQLite's planner keeps no statistics unless asked to, and Tether never asks)."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.monotonic) -> None:
        self._db = db
        self._clock = clock
        self._gap = MIN_GAP_S
        self._next_analyze = float("-inf")
        self._told_not_permitted = False

    async def check(self) -> StatisticsCheck | None:
        """Compare the planner's beliefs with the rows and analyze the table where one is far
        too low; None on SQLite, or while an ``ANALYZE`` of this process's is too recent."""
        if self._db.dialect.name != "postgresql" or self._clock() < self._next_analyze:
            return None
        async with self._db.connection() as conn:
            short = await _shortfalls(conn)
            if not short:
                return StatisticsCheck()
            permitted = bool(await conn.scalar(_PERMITTED))
        if not permitted:
            self._not_permitted(short)
            return StatisticsCheck(short, permitted=False)
        began = time.perf_counter()
        async with self._db.transaction() as conn:
            if not await conn.scalar(
                sa.text(f"SELECT pg_try_advisory_xact_lock({ANALYZE_LOCK_KEY})")
            ):
                return StatisticsCheck(short)  # another process is analyzing it now
            await conn.execute(sa.text("ANALYZE tether_invocations"))
        seconds = time.perf_counter() - began
        async with self._db.connection() as conn:
            still = await _shortfalls(conn)
        self._gap = min(MAX_GAP_S, self._gap * 2) if still else MIN_GAP_S
        self._next_analyze = self._clock() + self._gap
        log.info(
            "analyzed tether_invocations in %.2f s: the planner believed %s",
            seconds,
            "; ".join(f"{s.believed:.0f} {s.status} where {s.counted}+ are" for s in short),
        )
        return StatisticsCheck(short, analyzed=True, seconds=seconds)

    def _not_permitted(self, short: list[Shortfall]) -> None:
        if self._told_not_permitted:
            return
        self._told_not_permitted = True
        believed = "; ".join(f"{s.believed:.0f} {s.status} where {s.counted}+ are" for s in short)
        log.warning(
            "the planner believes %s, and this role may not ANALYZE tether_invocations (it needs "
            "the table's owner, the database's or a superuser): claims may be slow until "
            "autovacuum analyzes it; run ANALYZE tether_invocations as its owner, or lower "
            "autovacuum_analyze_scale_factor for it (docs/operations.md, 'Vacuum')",
            believed,
        )


async def _shortfalls(conn: Connection) -> list[Shortfall]:
    """The open statuses whose rows the planner believes far fewer than there are."""
    beliefs = {status: await _believed(conn, status) for status in OPEN}
    bounds = {s: n for s, b in beliefs.items() if (n := count_up_to(b)) is not None}
    if not bounds:
        return []
    counts = ", ".join(
        f"(SELECT count(*) FROM (SELECT 1 FROM tether_invocations WHERE status = '{s}'"
        f" LIMIT :{s}) AS rows_{s}) AS {s}"
        for s in bounds
    )
    row = (await conn.execute(sa.text(f"SELECT {counts}"), bounds)).one()
    counted = {s: int(getattr(row, s)) for s in bounds}
    return [Shortfall(s, beliefs[s], counted[s]) for s in bounds if counted[s] >= bounds[s]]


async def _believed(conn: Connection, status: str) -> float:
    """How many rows the planner believes ``status`` holds (the status written in, as every
    statement of the store's writes it: :func:`tether.store.schema.status_is`)."""
    plan = await conn.scalar(
        sa.text(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM tether_invocations WHERE status = '{status}'")
    )
    return float(plan[0]["Plan"]["Plan Rows"])
