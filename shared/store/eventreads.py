"""The event log's reads: a page of an invocation's events after a cursor, with the row's facts a
stream needs (owner, status, last cursor), for many streams in one statement.

A stream opens, replays and re-checks with this one read: it tells the gateway whether the
caller owns the invocation, which events follow the stream's cursor, and whether the stream is
over (terminal, and nothing left after the cursor). The facts and the events come from one
statement, so they agree with each other.

A page is a range of cursors, ``after < cursor <= after + limit``: cursors are dense (every
write advances ``last_event_id`` by exactly the events it inserts, :mod:`~tether.store.eventlog`)
so the range holds exactly the next ``limit`` events, found by a primary-key range scan, and
reads of different invocations share the statement without a per-invocation ``LIMIT``.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from tether.events import Event
from tether.jsonvalue import storable_text
from tether.store.bound import BoundBatch, Carriage
from tether.store.engine import Database
from tether.store.eventlog import output_of_completion, restored
from tether.store.schema import Status, events, invocations

inv = invocations.c
ev = events.c
LAST_CURSOR = 2**63 - 1
"""The largest cursor a ``BIGINT`` holds: a page's upper bound stops there."""


@dataclass(frozen=True, slots=True)
class StreamRead:
    """The events of ``invocation_id`` after cursor ``after``, at most ``limit`` of them."""

    invocation_id: str
    after: int
    limit: int


@dataclass(frozen=True, slots=True)
class StreamPage:
    """What one :class:`StreamRead` found: the invocation's owner, status and last cursor as
    they stood when its events were read, and those events in cursor order. ``seq`` tells rows
    apart: an id reused after retention deleted its row names a row with another ``seq``."""

    owner: str
    status: Status
    last_event_id: int
    seq: int
    events: list[Event]

    def ends_stream(self, sent: int) -> bool:
        """A reader that has sent up to ``sent`` (this page included) has nothing more to get."""
        return self.status.is_terminal and sent >= self.last_event_id

    def has_more(self, sent: int) -> bool:
        """Events past ``sent`` exist already (read the next page now)."""
        return sent < self.last_event_id


class EventReads:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def events_after(self, invocation_id: str, after: int, limit: int = 1000) -> list[Event]:
        output = sa.select(inv.output).where(inv.id == ev.invocation_id).scalar_subquery()
        query = (
            sa.select(ev.cursor, ev.type, ev.data, output_of_completion(ev.type, output))
            .where(ev.invocation_id == invocation_id, ev.cursor > after)
            .order_by(ev.cursor)
            .limit(limit)
        )
        async with self._db.connection() as conn:
            rows = (await conn.execute(query)).all()
        return [_event(r) for r in rows]

    async def read_streams(self, reads: Sequence[StreamRead]) -> list[StreamPage | None]:
        """One page per read, in order, in one statement; None where the invocation does not
        exist (never was, or deleted by retention)."""
        if not reads:
            return []
        spans: dict[str, tuple[int, int]] = {}  # reads of one invocation share its rows
        for read in reads:
            if not storable_text(read.invocation_id):  # names no row; must not fail the others
                continue
            upto = min(read.after + read.limit, LAST_CURSOR)
            low, high = spans.get(read.invocation_id, (read.after, upto))
            spans[read.invocation_id] = (min(low, read.after), max(high, upto))
        found = await self._spans(spans)
        return [_page_of(found.get(read.invocation_id), read) for read in reads]

    async def _spans(self, spans: dict[str, tuple[int, int]]) -> dict[str, StreamPage]:
        """Each invocation's facts and its events in ``low < cursor <= high``."""
        ids = list(spans)
        if not ids:
            return {}
        carriage = self._db.dialect.carriage
        wanted = [(n, i, *spans[i]) for n, i in enumerate(ids)]
        async with self._db.connection() as conn:
            rows = (
                await conn.execute(_pages_query(carriage), WANTED.params(wanted, carriage=carriage))
            ).all()
        found: dict[str, StreamPage] = {}
        for row in rows:
            invocation_id = ids[row.n]
            page = found.get(invocation_id)
            if page is None:
                page = StreamPage(row.owner, Status(row.status), row.last_event_id, row.seq, [])
                found[invocation_id] = page
            if row.cursor is not None:
                page.events.append(_event(row))
        return found


def _event(row: sa.Row[Any]) -> Event:
    return Event(row.cursor, row.type, restored(row.type, row.data, row.completed_output))


def _page_of(span: StreamPage | None, read: StreamRead) -> StreamPage | None:
    """One read's share of its invocation's span (the same Event objects: decoded once)."""
    if span is None:
        return None
    cursors = [e.cursor for e in span.events]
    first = bisect.bisect_right(cursors, read.after)
    last = bisect.bisect_right(cursors, read.after + read.limit)
    events = span.events[first:last]
    return StreamPage(span.owner, span.status, span.last_event_id, span.seq, events)


WANTED = BoundBatch(
    "wanted",
    (
        sa.column("n", sa.Integer),
        sa.column("id", sa.Text),
        sa.column("after_cursor", sa.BigInteger),
        sa.column("upto", sa.BigInteger),
    ),
)
"""The reads of one statement: each one's place, invocation and range of cursors."""


@functools.cache
def _pages_query(carriage: Carriage) -> sa.Select[Any]:
    """Any number of reads in one statement (:class:`.bound.BoundBatch`: one text whatever
    their number; it was a ``VALUES`` list with four parameters a read, padded to a power of
    two): each read's invocation row (owner, status, last cursor, seq) left-joined to its range
    of events."""
    wanted = WANTED.cte(carriage)
    in_range = sa.and_(
        ev.invocation_id == wanted.c.id,
        ev.cursor > wanted.c.after_cursor,
        ev.cursor <= wanted.c.upto,
    )
    return (
        sa.select(
            wanted.c.n,
            inv.owner,
            inv.status,
            inv.last_event_id,
            inv.seq,
            ev.cursor,
            ev.type,
            ev.data,
            output_of_completion(ev.type, inv.output),
        )
        .select_from(wanted.join(invocations, inv.id == wanted.c.id).outerjoin(events, in_range))
        .order_by(wanted.c.n, ev.cursor)
    )
