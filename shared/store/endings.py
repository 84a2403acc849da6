"""Terminal transitions, written once for whoever makes them: an attempt finishing, the reaper
ending a dead attempt, the API cancelling a queued invocation.

One statement ends every row of a batch that still meets its condition, writes its outcome and
its last events (the terminal one last), and each ended invocation names its session's next
queued invocation, which may run now. The ended rows leave their owner's and tenant's open
counts (:mod:`.opencounts`), locked after the invocation rows.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from tether.events import Event
from tether.outcomes import Outcome
from tether.store.bound import BoundBatch
from tether.store.connection import Connection
from tether.store.dialect import Dialect
from tether.store.eventlog import advanced, insert_events, numbered
from tether.store.opencounts import add_open, changes, closed_in
from tether.store.schema import Json, Status, invocations, status_is
from tether.store.writes import Finished, FinishRequest, NewEvent

inv = invocations.c


@dataclass(frozen=True, slots=True)
class Ending:
    """An invocation to end, if it is still ``from_status`` (and still under ``attempt``, and
    has not beaten for ``stale_after`` seconds, when those are set)."""

    invocation_id: str
    outcome: Outcome
    pending: Sequence[NewEvent] = ()
    from_status: Status = Status.ACTIVE
    attempt: int | None = None
    stale_after: float | None = None

    @classmethod
    def of(cls, request: FinishRequest) -> Ending:
        return cls(
            request.invocation_id,
            request.outcome,
            request.pending,
            attempt=request.attempt,
            stale_after=request.stale_after,
        )

    @property
    def event_count(self) -> int:
        """How many events the ending appends: what it buffered, then the terminal one."""
        return len(self.pending) + 1

    @property
    def events(self) -> list[NewEvent]:
        outcome = self.outcome
        return [*self.pending, NewEvent(outcome.event_type, outcome.event_data, outcome.event_text)]


async def write_endings(
    conn: Connection, dialect: Dialect, endings: Sequence[Ending]
) -> list[Finished | None]:
    """End every invocation whose condition holds; None for the others. Ids are distinct."""
    if not endings:
        return []
    ended = {row.id: row for row in await conn.execute(*_end_all(dialect, endings))}
    results: list[Finished | None] = []
    logged: dict[str, list[Event]] = {}
    for ending in endings:
        row = ended.get(ending.invocation_id)
        if row is None:
            results.append(None)
            continue
        logged[ending.invocation_id] = numbered(row.last_event_id, ending.events)
        successor = await _successor(conn, row.owner, row.session_id)
        results.append(Finished(logged[ending.invocation_id], successor))
    await insert_events(conn, dialect, logged)
    if not dialect.writes_in_with:  # else the ending statement took them off (closed_in)
        await add_open(conn, dialect, changes(((r.owner, r.tenant) for r in ended.values()), -1))
    return results


ENDS = BoundBatch(
    "ends",
    (
        sa.column("id", sa.Text),
        sa.column("from_status", sa.Text),
        sa.column("attempt", sa.Integer),
        sa.column("stale_after", sa.Float),
        sa.column("status", sa.Text),
        sa.column("output", Json),
        sa.column("error_code", sa.Text),
        sa.column("error_message", sa.Text),
        sa.column("events", sa.Integer),
    ),
)


def _end_all(
    dialect: Dialect, endings: Sequence[Ending]
) -> tuple[sa.Update | sa.Select[Any], dict[str, object]]:
    rows = [
        (
            e.invocation_id,
            e.from_status.value,
            e.attempt,
            e.stale_after,
            e.outcome.status.value,
            e.outcome.stored_output,
            e.outcome.code,
            e.outcome.error_message,
            e.event_count,
        )
        for e in endings
    ]
    return _end_statement(dialect), ENDS.params(rows, carriage=dialect.carriage)


@functools.cache
def _end_statement(dialect: Dialect) -> sa.Update | sa.Select[Any]:
    ends = ENDS.cte(dialect.carriage)
    attempt = sa.cast(ends.c.attempt, sa.Integer)  # a column all NULL may come out as text
    stale_after = sa.cast(ends.c.stale_after, sa.Float)
    end = (
        sa.update(invocations)
        .where(
            inv.id == ends.c.id,
            inv.status == ends.c.from_status,
            sa.or_(attempt.is_(None), inv.attempt == attempt),
            sa.or_(
                stale_after.is_(None),
                sa.and_(  # the reaper's: a dead attempt, and a cancel asked since its read wins
                    inv.heartbeat_at < dialect.now - stale_after,
                    sa.or_(ends.c.status == Status.CANCELLED.value, ~inv.cancel_requested),
                ),
            ),
        )
        .values(
            status=ends.c.status,
            output=ends.c.output,
            error_code=ends.c.error_code,
            error_message=ends.c.error_message,
            finished_at=dialect.now,
            last_event_id=advanced(ends.c.events),
        )
        .returning(inv.id, inv.owner, inv.tenant, inv.session_id, inv.last_event_id)
    )
    ended = end.cte("ended")
    closed = closed_in(dialect, ended)
    if closed is None:
        return end
    return sa.select(ended.c.id, ended.c.owner, ended.c.session_id, ended.c.last_event_id).add_cte(
        closed
    )


async def _successor(conn: Connection, owner: str, session_id: str | None) -> str | None:
    """The session's next queued invocation, which may run now that this one ended."""
    if session_id is None:
        return None
    successor = await conn.scalar(
        sa.select(inv.id)
        .where(
            inv.owner == owner,
            inv.session_id == session_id,
            status_is(inv.status, Status.QUEUED),
        )
        .order_by(inv.seq)
        .limit(1)
    )
    return None if successor is None else str(successor)
