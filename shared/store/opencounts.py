"""Each owner's and each tenant's open invocations (queued, active, waiting), kept as counts.

Every accept checks the owner cap and the tenant's ``max_queued``. Counting the open rows of a
batch's owners read every one of them: on PostgreSQL 5.8 ms a batch of ~16 accepts at 600 open
per owner, the accept path's largest cost. Instead ``tether_open_counts`` holds one count per
owner and per tenant: an accept adds its new rows and reads the sums in the same statement, a
refused row and every terminal transition (:mod:`.endings`, the one place invocations end)
take theirs off, each in the transaction that makes the change. Moves between open statuses
(a park, a resume, a crash's replacement) change no count, and retention deletes only
terminal rows.

A count's row stays locked by the transaction that changed it until it ends, so two accepts
for one owner take turns and the cap holds exactly across gateways. Every transaction locks its
counts in (scope, name) order, after every invocation row it locks, and afterwards writes only
rows it already holds or just inserted (an ending's events): one waiting for a count holds
nothing the holder of that count could want, so no two wait for each other. The price: an
owner's (or tenant's) accepts and endings queue on its count row, each for the rest of its
transaction.

A count can drift from the rows when something writes them around the store (a manual
``DELETE``, a ``TRUNCATE``, a process of an older version). One that reads too high would refuse
an owner for good, so before a refusal stands, :func:`correct` counts the refused keys' rows
again under their count rows' locks and writes the true figure (at most once per key and
:data:`RECOUNT_PACE_S` in a process, so an owner at its cap does not pay the row count on every
request). One that reads too low would let an owner past its cap, which no refusal reveals: so
every worker's reaper audits the counts every ``timers.count_audit`` (:func:`suspects`, then
:func:`lock_counts` and :func:`correct` for each key that differs). ``tether migrate --recount``
(:func:`recount_open`) counts every key again at once.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping

import sqlalchemy as sa

from tether.status import OPEN
from tether.store.bound import BoundBatch
from tether.store.connection import Connection
from tether.store.dialect import Dialect
from tether.store.schema import invocations, open_counts, status_is

log = logging.getLogger(__name__)

OWNER = "owner"
TENANT = "tenant"
Key = tuple[str, str]
"""(scope, name): ``(OWNER, owner)`` or ``(TENANT, tenant)``."""

CHANGES = BoundBatch(
    "changes",
    (sa.column("scope", sa.Text), sa.column("name", sa.Text), sa.column("change", sa.BigInteger)),
)


def changes(rows: Iterable[tuple[str, str]], sign: int) -> Counter[Key]:
    """The change to the counts of ``rows`` (owner, tenant) opened (+1) or closed (-1)."""
    changed: Counter[Key] = Counter()
    for owner, tenant in rows:
        changed[OWNER, owner] += sign
        changed[TENANT, tenant] += sign
    return changed


async def add_open(
    conn: Connection, dialect: Dialect, changed: Mapping[Key, int]
) -> dict[Key, int]:
    """Apply ``changed`` to the counts, in key order (the lock order), in one statement; the
    new counts of the changed keys."""
    return await _upsert(conn, dialect, {key: change for key, change in changed.items() if change})


async def lock_counts(conn: Connection, dialect: Dialect, keys: Iterable[Key]) -> dict[Key, int]:
    """Hold the count rows of ``keys`` for the rest of the transaction, in key order (a key
    without one gets a row at 0); their counts."""
    return await _upsert(conn, dialect, dict.fromkeys(keys, 0))


async def _upsert(conn: Connection, dialect: Dialect, changed: Mapping[Key, int]) -> dict[Key, int]:
    rows = sorted((scope, name, change) for (scope, name), change in changed.items())
    if not rows:
        return {}
    result = await conn.execute(
        _add_statement(dialect), CHANGES.params(rows, carriage=dialect.carriage)
    )
    return {(row.scope, row.name): int(row.open_count) for row in result}


async def recount_open(conn: Connection, dialect: Dialect) -> None:
    """Count every open invocation again, in the caller's transaction: for rows written by
    other means than the store (a benchmark's seeded backlog)."""
    for statement in recount_statements(dialect.name):
        await conn.execute(sa.text(statement))


def recount_statements(dialect: str) -> list[str]:
    """The SQL of :func:`recount_open`, for a client of its own (one transaction). PostgreSQL
    holds off every write to invocations until it ends, so the counts match the rows."""
    is_open = "status IN (" + ", ".join(f"'{status}'" for status in OPEN) + ")"
    recount = [
        "INSERT INTO tether_open_counts (scope, name, open_count)"
        f" SELECT '{scope}', {scope}, count(*) FROM tether_invocations"
        f" WHERE {is_open} GROUP BY {scope}"
        for scope in (OWNER, TENANT)
    ]
    lock = (  # the counts too: an audit holds count rows while it reads invocations
        [
            "LOCK TABLE tether_invocations IN SHARE MODE",
            "LOCK TABLE tether_open_counts IN EXCLUSIVE MODE",
        ]
        if dialect == "postgresql"
        else []
    )
    return [*lock, "DELETE FROM tether_open_counts", *recount]


RECOUNT_PACE_S = 10.0
"""How long after counting a key's rows again a process takes its count as it stands."""
RECOUNTS_KEPT = 4096
"""Keys a process remembers counting before it forgets those counted over a pace ago (and then
not again until it remembers twice as many as are left, so a flood of refused keys does not
sweep the map on every refusal)."""


class RecountPace:
    """Which keys a refusal may count again now: each at most once per ``pace`` seconds."""

    def __init__(
        self, pace: float = RECOUNT_PACE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._pace = pace
        self._clock = clock
        self._counted_at: dict[Key, float] = {}
        self._sweep_past = RECOUNTS_KEPT

    def __len__(self) -> int:
        """How many keys it remembers."""
        return len(self._counted_at)

    def due(self, keys: Iterable[Key]) -> list[Key]:
        """The keys not counted within the pace, in key order, now marked counted."""
        now = self._clock()
        if len(self._counted_at) > self._sweep_past:
            self._counted_at = {
                key: at for key, at in self._counted_at.items() if now - at < self._pace
            }
            self._sweep_past = max(RECOUNTS_KEPT, 2 * len(self._counted_at))
        due = [
            key for key in sorted(set(keys)) if now - self._counted_at.get(key, -1e18) >= self._pace
        ]
        self._counted_at.update((key, now) for key in due)
        return due


async def correct(
    conn: Connection, counts: Mapping[Key, int], keys: Collection[Key]
) -> dict[Key, int]:
    """Count the open rows of ``keys`` (whose count rows this transaction holds: ``counts`` are
    their values) and write the true figure where it differs; the true counts of ``keys``."""
    true: dict[Key, int] = {}
    for scope in (OWNER, TENANT):
        names = [name for key_scope, name in keys if key_scope == scope]
        if names:
            rows = await conn.execute(_COUNT_ROWS[scope], {"names": names})
            found = {name: n for name, n in rows.all()}
            true.update({(scope, name): int(found.get(name, 0)) for name in names})
    drifted = [key for key, n in true.items() if counts.get(key) != n]
    for scope, name in drifted:
        log.warning(
            "open count of %s %r read %s, its open rows are %d: corrected",
            scope,
            name,
            counts.get((scope, name)),
            true[scope, name],
        )
    if drifted:
        await conn.execute(_SET_COUNT, [{"s": s, "n": n, "count": true[s, n]} for s, n in drifted])
    return true


async def suspects(conn: Connection) -> list[Key]:
    """The keys whose count differs from their open rows, in key order, read without a lock
    on a connection whose reads see one moment (every transaction changes a key's rows and its
    count together, so a key that differs there has drifted). Each is then counted again under
    its count row's lock (:func:`lock_counts`, :func:`correct`), since rows and counts may have
    changed since that moment."""
    kept_rows = await conn.execute(
        sa.select(open_counts.c.scope, open_counts.c.name, open_counts.c.open_count).where(
            open_counts.c.open_count != 0
        )
    )
    kept = {(scope, name): int(n) for scope, name, n in kept_rows.all()}
    found: dict[Key, int] = {}
    for scope, statement in _OPEN_ROWS.items():
        rows = await conn.execute(statement)
        found.update(((scope, name), int(n)) for name, n in rows.all())
    return sorted(key for key in kept.keys() | found.keys() if kept.get(key) != found.get(key))


def _open_rows(column: sa.ColumnElement[str]) -> sa.Select[str, int]:
    return (
        sa.select(column, sa.func.count())
        .where(status_is(invocations.c.status, *OPEN))
        .group_by(column)
    )


_SCOPES = {OWNER: invocations.c.owner, TENANT: invocations.c.tenant}
_OPEN_ROWS = {scope: _open_rows(column) for scope, column in _SCOPES.items()}
"""Every name's open rows, per scope (the audit's)."""
_COUNT_ROWS = {
    scope: _open_rows(column).where(
        column.in_(sa.bindparam("names", expanding=True, type_=sa.Text))
    )
    for scope, column in _SCOPES.items()
}
"""Open rows per name of a scope, through the open-by-owner and open-by-tenant indexes."""
_SET_COUNT = (
    sa.update(open_counts)
    .where(open_counts.c.scope == sa.bindparam("s"), open_counts.c.name == sa.bindparam("n"))
    .values(open_count=sa.bindparam("count"))
)


def closed_in(dialect: Dialect, rows: sa.CTE) -> sa.CTE | None:
    """Where the database runs a write inside a ``WITH`` (PostgreSQL): a CTE taking ``rows``
    (an ``owner`` and a ``tenant`` column; the invocations a statement just ended) off their
    counts, in key order, for that statement to add (``add_cte``): one round trip fewer for
    each batch of endings. None elsewhere: call :func:`add_open` after the statement."""
    if not dialect.writes_in_with:
        return None
    taken = sa.union_all(
        *(
            sa.select(
                sa.literal(scope).label("scope"), column.label("name"), -sa.func.count()
            ).group_by(column)
            for scope, column in ((OWNER, rows.c.owner), (TENANT, rows.c.tenant))
        )
    ).order_by(sa.literal_column("scope"), sa.literal_column("name"))
    insert = dialect.upsert(open_counts).from_select(["scope", "name", "open_count"], taken)
    upsert: sa.Insert = insert.on_conflict_do_update(
        index_elements=["scope", "name"],
        set_={"open_count": open_counts.c.open_count + insert.excluded.open_count},
    )
    return upsert.cte("closed")


@functools.cache
def _add_statement(dialect: Dialect) -> sa.Insert:
    batch = CHANGES.cte(dialect.carriage)
    change = sa.cast(batch.c.change, sa.BigInteger)
    rows = (
        sa.select(batch.c.scope, batch.c.name, change)
        .where(sa.true())  # SQLite parses an upsert from a SELECT only with a WHERE
        .order_by(batch.c.scope, batch.c.name)
    )
    insert = dialect.upsert(open_counts).from_select(["scope", "name", "open_count"], rows)
    upsert: sa.Insert = insert.on_conflict_do_update(
        index_elements=["scope", "name"],
        set_={"open_count": open_counts.c.open_count + insert.excluded.open_count},
    )
    return upsert.returning(open_counts.c.scope, open_counts.c.name, open_counts.c.open_count)
