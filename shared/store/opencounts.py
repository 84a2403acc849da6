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
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping

import sqlalchemy as sa

from tether.status import OPEN
from tether.store.bound import BoundBatch
from tether.store.connection import Connection
from tether.store.dialect import Dialect
from tether.store.schema import open_counts

OWNER = "owner"
TENANT = "tenant"
Key = tuple[str, str]
"""(scope, name): ``(OWNER, owner)`` or ``(TENANT, tenant)``."""

CHANGES = (
    sa.column("scope", sa.Text),
    sa.column("name", sa.Text),
    sa.column("change", sa.BigInteger),
)
NO_CHANGE = ("", "", 0)
"""A filler row (:class:`.bound.BoundBatch`), skipped: no count has the scope ``""``."""


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
    rows = sorted((scope, name, change) for (scope, name), change in changed.items() if change)
    if not rows:
        return {}
    batch = _changes(dialect)
    result = await conn.execute(
        _add_statement(dialect, batch.shape(len(rows))), batch.params(rows, NO_CHANGE)
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
    lock = ["LOCK TABLE tether_invocations IN SHARE MODE"] if dialect == "postgresql" else []
    return [*lock, "DELETE FROM tether_open_counts", *recount]


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


def _changes(dialect: Dialect) -> BoundBatch:
    return BoundBatch("changes", CHANGES, dialect.arrays)


@functools.cache
def _add_statement(dialect: Dialect, shape: int) -> sa.Insert:
    batch = _changes(dialect).cte(shape)
    change = sa.cast(batch.c.change, sa.BigInteger)
    rows = (
        sa.select(batch.c.scope, batch.c.name, change)
        .where(batch.c.scope != "")  # also SQLite's "WHERE" that an upsert from SELECT needs
        .order_by(batch.c.scope, batch.c.name)
    )
    insert = dialect.upsert(open_counts).from_select(["scope", "name", "open_count"], rows)
    upsert: sa.Insert = insert.on_conflict_do_update(
        index_elements=["scope", "name"],
        set_={"open_count": open_counts.c.open_count + insert.excluded.open_count},
    )
    return upsert.returning(open_counts.c.scope, open_counts.c.name, open_counts.c.open_count)
