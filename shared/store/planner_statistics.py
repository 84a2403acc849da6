"""The planner's picture of the invocations, analyzed again when an open status outgrows it.

A claim finds its rows through the partial indexes on statuses, and the planner picks among
them by how many rows it believes each status holds, from the table's statistics. ``ANALYZE``
takes those (autovacuum's, once a tenth of the table has changed since the last one), and a
status's share swings from none to most of the table within minutes: a burst queues
thousands, the workers drain them. Statistics taken while nothing was queued say nothing is,
and the planner then reads every queued row's index entry once per tenant with queued work
(the claim's scan for them, :mod:`tether.store.candidates`) and per tenant it starts: 3.1 to
4.3 s a claim of 32 at 50,000 queued over 256 tenants, against 5 to 10 ms with the backlog
analyzed (``bench quietspell``), until autovacuum's next ``ANALYZE``, which on a table of
millions of finished invocations can be a long backlog away, and never where autovacuum is off.

So every worker's reaper, each ``timers.statistics_check``, asks the planner how many rows it
believes each open status holds (an ``EXPLAIN`` of each) and counts each status's rows up to what
would prove that belief far too low: :data:`FACTOR` times it, and at least :data:`FLOOR` rows
(fewer are cheap whatever the plan). A status counted past :data:`FLOOR` is counted only if the
table has changed enough since its last ``ANALYZE`` for it to have grown that much
(``n_mod_since_analyze``, where PostgreSQL counts changes and knows of an ``ANALYZE``: after a
crash or ``pg_stat_reset()`` every status is counted); one believed almost empty (the case of a
quiet spell) is counted to :data:`FLOOR` at every check, without waiting for PostgreSQL to report
the changes. None the planner believes holds :data:`CEILING` rows or more is counted: it already
plans for a large set. When a status holds that many, the process runs ``ANALYZE (SKIP_LOCKED)
tether_invocations`` (it reads a sample of the table, not all of it, and waits for no lock: one
that a lock held elsewhere makes skip the table counts for nothing) under a transaction advisory
lock, unless the table's last ``ANALYZE``, whoever ran it, is less than :data:`MIN_GAP_S` old on
the database's clock. A status an ``ANALYZE`` of the process's own leaves as far off (too rare in a
huge table for the sample to find) is analyzed for again only twice as long after the table's last
``ANALYZE`` each time, up to :data:`MAX_GAP_S`, until a count finds it under its bound; any other
status's shortfall waits only the least gap.

``ANALYZE`` needs the table's owner, the database's, a superuser or (PostgreSQL 17) the
``MAINTAIN`` privilege; a process whose role has none of them says so once in the log, with what
to run instead (docs/operations.md, "Vacuum"), and checks again after :data:`MAX_GAP_S`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from tether.status import OPEN
from tether.store.connection import Connection
from tether.store.dialect import ANALYZE_LOCK_KEY
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
"""Least seconds between two ``ANALYZE`` runs for the same shortfall, and since any ``ANALYZE``
of the table (another process's, autovacuum's) after which the shortfall remains."""
MAX_GAP_S = 600.0
"""Most seconds the gap doubles to while ``ANALYZE`` does not fix what the planner believes."""

_BELIEFS = {
    status: sa.text(
        f"EXPLAIN (FORMAT JSON) SELECT 1 FROM tether_invocations WHERE status = '{status}'"
    )
    for status in OPEN
}
"""The planner's estimate of each open status's rows (the status written in, as every statement
of the store's writes it: :func:`tether.store.schema.status_is`)."""
_COUNTS = sa.text(
    "SELECT "
    + ", ".join(
        f"(SELECT count(*) FROM (SELECT 1 FROM tether_invocations WHERE status = '{status}'"
        f" LIMIT :{status}) AS rows_{status}) AS {status}"
        for status in OPEN
    )
)
"""Each open status's rows, counted up to its bound (0: not counted)."""
_ANALYZED = sa.text(
    "SELECT s.n_mod_since_analyze AS changed, current_setting('track_counts') AS tracked, "
    "extract(epoch FROM now() - greatest(s.last_analyze, s.last_autoanalyze)) AS since, "
    "greatest(s.last_analyze, s.last_autoanalyze) AS analyzed_at "
    "FROM pg_stat_user_tables AS s WHERE s.relid = to_regclass('tether_invocations')"
)
"""Since the table's last ``ANALYZE`` (anyone's): the rows changed, and the seconds passed."""
_FRESH = sa.text("SELECT pg_stat_clear_snapshot()")
"""The statistics views read anew within a transaction (they are read once per transaction)."""
_PERMITTED = sa.text(
    "SELECT pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE') OR CASE "
    "WHEN current_setting('server_version_num')::int >= 170000 "
    "THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END "
    "FROM pg_class AS c, pg_database AS d "
    "WHERE c.oid = to_regclass('tether_invocations') AND d.datname = current_database()"
)
_LOCK = sa.text(f"SELECT pg_try_advisory_xact_lock({ANALYZE_LOCK_KEY})")
_ANALYZE = sa.text("ANALYZE (SKIP_LOCKED) tether_invocations")


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A status the planner believes holds ``believed`` rows, of which at least ``counted``
    were found."""

    status: str
    believed: float
    counted: int


@dataclass(frozen=True, slots=True)
class StatisticsCheck:
    """What one check found and did: the statuses the planner believes far too few of, and
    whether this process analyzed the table for them (it may not have: another process was at
    it or analyzed it lately, the same shortfall waits out its gap, or a lock held elsewhere
    made ``ANALYZE`` skip the table)."""

    short: tuple[Shortfall, ...] = ()
    analyzed: bool = False
    permitted: bool = True
    seconds: float = 0.0
    """How long the ``ANALYZE`` took."""
    gap: float = 0.0
    """Seconds after an ``ANALYZE`` before this process analyzes again for the statuses the
    last one of its own left short (0: none left short)."""


@dataclass(frozen=True, slots=True)
class Analyzed:
    """The table's statistics state: rows changed since its last ``ANALYZE`` (None where not
    counted), seconds since it, and when it was (None: never, or its counters were reset)."""

    changed: float | None
    since: float | None
    at: object | None


def count_up_to(believed: float) -> int | None:
    """How many of a status's rows to count to show that a belief of ``believed`` rows is far
    too low; None: not counted (believed large already)."""
    if believed >= CEILING:
        return None
    return max(FLOOR, int(FACTOR * believed))


class PlannerStatistics:
    """One process's checks of one database (PostgreSQL; the embedded store has nothing to
    check: SQLite's planner keeps no statistics unless asked to, and Tether never asks).

    The gap is measured on the database's clock from the table's last ``ANALYZE``, whoever ran
    it, so every process waits it out from the same moment."""

    def __init__(
        self,
        db: Database,
        clock: Callable[[], float] = time.monotonic,
        min_gap: float = MIN_GAP_S,
    ) -> None:
        self._db = db
        self._clock = clock
        self._min_gap = min_gap
        self._gap = min_gap
        self._left_short: frozenset[str] = frozenset()
        """The statuses this process's last ``ANALYZE`` left short, until a count finds each
        under its bound: analyzed for again only ``_gap`` after the table's last ``ANALYZE``."""
        self._quiet_until = float("-inf")
        """Not permitted to analyze: no check until then (this process's clock)."""
        self._told_not_permitted = False

    async def check(self) -> StatisticsCheck | None:
        """Compare the planner's beliefs with the rows and analyze the table where one is far
        too low; None on SQLite, or while this process's role may not analyze it."""
        if self._db.dialect.name != "postgresql" or self._clock() < self._quiet_until:
            return None
        async with self._db.connection() as conn:
            state = await _analyzed(conn)
            short, counted = await _survey(conn, state.changed)
            self._forget({s.status for s in short}, counted)
            if not short or self._waiting(short, state):
                return self._found(short)
            if not await conn.scalar(_PERMITTED):
                self._not_permitted(short)
                return StatisticsCheck(short, permitted=False)
        began = time.perf_counter()
        async with self._db.transaction() as conn:
            if not await conn.scalar(_LOCK):
                return self._found(short)  # another process is analyzing it now
            state = await _analyzed(conn)
            if self._waiting(short, state):
                return self._found(short)  # another process analyzed it a moment ago
            await conn.execute(_ANALYZE)
            await conn.execute(_FRESH)
            if (await _analyzed(conn)).at == state.at:
                return self._found(short)  # skipped: a lock held elsewhere (SKIP_LOCKED)
        seconds = time.perf_counter() - began
        async with self._db.connection() as conn:
            still, _ = await _survey(conn, None)  # the ANALYZE resets the changes: count all
        if still:
            self._gap = min(MAX_GAP_S, self._gap * 2)
            self._left_short = frozenset(s.status for s in still)
        else:
            self._gap, self._left_short = self._min_gap, frozenset()
        log.info(
            "analyzed tether_invocations in %.2f s: the planner believed %s", seconds, _told(short)
        )
        return StatisticsCheck(short, analyzed=True, seconds=seconds, gap=self._left_gap())

    def _waiting(self, short: Sequence[Shortfall], state: Analyzed) -> bool:
        """Whether the table was analyzed too lately to analyze it again for ``short``: within
        the gap if this process's last ``ANALYZE`` left these same statuses short, else within
        the least gap."""
        if state.since is None:
            return False
        own = {s.status for s in short} <= self._left_short
        return state.since < (self._gap if own else self._min_gap)

    def _forget(self, short: set[str], counted: frozenset[str]) -> None:
        """Statuses counted and found under their bound are no longer left short; a status not
        counted (too few changes since the last ``ANALYZE``) proves nothing either way."""
        self._left_short -= counted - short
        if not self._left_short:
            self._gap = self._min_gap

    def _found(self, short: tuple[Shortfall, ...]) -> StatisticsCheck:
        return StatisticsCheck(short, gap=self._left_gap())

    def _left_gap(self) -> float:
        return self._gap if self._left_short else 0.0

    def _not_permitted(self, short: Sequence[Shortfall]) -> None:
        self._quiet_until = self._clock() + MAX_GAP_S
        if self._told_not_permitted:
            return
        self._told_not_permitted = True
        log.warning(
            "the planner believes %s, and this role may not ANALYZE tether_invocations (it needs "
            "the table's owner, the database's, a superuser or the MAINTAIN privilege): claims "
            "may be slow until autovacuum analyzes it; run ANALYZE tether_invocations as its "
            "owner, or lower autovacuum_analyze_scale_factor for it (docs/operations.md, "
            "'Vacuum')",
            _told(short),
        )


def _told(short: Sequence[Shortfall]) -> str:
    return "; ".join(f"{s.believed:.0f} {s.status} where {s.counted}+ are" for s in short)


async def _survey(
    conn: Connection, changed: float | None
) -> tuple[tuple[Shortfall, ...], frozenset[str]]:
    """The open statuses whose rows the planner believes far fewer than there are, and the
    statuses counted. With ``changed`` (rows changed since the last ``ANALYZE``), a status
    counted past :data:`FLOOR` is counted only if it could have grown that far from what that
    ``ANALYZE`` saw."""
    beliefs = {status: await _believed(conn, status) for status in OPEN}
    bounds = {}
    for status, believed in beliefs.items():
        bound = count_up_to(believed)
        # counted to FLOOR (a status believed almost empty): cheap, and no waiting for
        # PostgreSQL to report the changes (it may take seconds)
        if bound is not None and (changed is None or bound <= FLOOR or changed >= bound - believed):
            bounds[status] = bound
    if not bounds:
        return (), frozenset()
    row = (await conn.execute(_COUNTS, {s: bounds.get(s, 0) for s in OPEN})).one()
    counted = {s: int(getattr(row, s)) for s in bounds}
    short = tuple(Shortfall(s, beliefs[s], counted[s]) for s in bounds if counted[s] >= bounds[s])
    return short, frozenset(bounds)


async def _analyzed(conn: Connection) -> Analyzed:
    """The table's statistics state. Changes count only where PostgreSQL counts them
    (``track_counts``) and since an ``ANALYZE`` it knows of: after its counters were reset (a
    crash, ``pg_stat_reset()``) they start from 0 while the statistics stay as they were."""
    row = (await conn.execute(_ANALYZED)).first()
    if row is None:
        return Analyzed(None, None, None)
    since = None if row.since is None else float(row.since)
    known = row.tracked == "on" and row.analyzed_at is not None
    return Analyzed(float(row.changed) if known else None, since, row.analyzed_at)


async def _believed(conn: Connection, status: str) -> float:
    """How many rows the planner believes ``status`` holds."""
    plan = await conn.scalar(_BELIEFS[status])
    return float(plan[0]["Plan"]["Plan Rows"])
