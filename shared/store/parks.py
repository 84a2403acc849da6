"""Parking: attempts end as ``waiting`` on their durable waits, many in one transaction.

A park is fenced like a finish (:mod:`.attempts`): in one transaction the invocation goes
``active → waiting`` under the attempt's number (holding no worker, no heartbeat), its waits
are written and its last events are appended, ``run.waiting`` last. An attempt whose invocation's
cancel was requested may not park (:class:`.journal.CancelPending`, nothing written): its finish
ends it ``cancelled``, so the cancel is not left on a waiting invocation that no worker holds.

Parks from many attempts go together (:mod:`.batching`'s rules): one statement moves every row,
one inserts every wait, one appends every event. Parked one transaction each, the resumed
attempts of a burst arrived at PostgreSQL in bunches that contended for the relation extension
lock, which then extended the tables ahead (docs/performance-history.md).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from tether.events import RUN_WAITING, Event
from tether.outcomes import waiting_data
from tether.store.attempts import COUNTS, advance_statement
from tether.store.batching import one, write_batch
from tether.store.bound import Carriage
from tether.store.connection import Connection
from tether.store.dialect import Dialect
from tether.store.engine import Database
from tether.store.errors import StoreError, Superseded
from tether.store.eventlog import insert_events, numbered
from tether.store.journal import CancelPending, NewWait, WaitRecord
from tether.store.schema import Status, invocations, status_is, waits
from tether.store.writes import NewEvent

inv = invocations.c


@dataclass(frozen=True, slots=True)
class ParkRequest:
    """An attempt's park under its fence: its new waits, after the events it still buffered."""

    invocation_id: str
    attempt: int
    waits: Sequence[NewWait]
    pending: Sequence[NewEvent] = ()


ParkResult = list[Event] | Superseded | CancelPending
"""The events a park appended (``run.waiting`` last), or why it did not park."""


class Parks:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def park(
        self,
        invocation_id: str,
        attempt: int,
        new_waits: Sequence[NewWait],
        pending: Sequence[NewEvent] = (),
    ) -> list[Event] | None:
        """One park (a batch of one): its events; None if the attempt was superseded. Raises
        :class:`.journal.CancelPending` when a cancel was requested."""
        request = ParkRequest(invocation_id, attempt, new_waits, pending)
        try:
            return one(await self.park_many([request]))
        except Superseded:
            return None

    async def park_many(self, requests: Sequence[ParkRequest]) -> list[ParkResult | StoreError]:
        """End each attempt as ``waiting`` on its waits, appending its events."""
        return await write_batch(requests, _invocation_id, self._park)

    async def _park(self, requests: Sequence[ParkRequest], alone: bool) -> dict[int, ParkResult]:
        dialect = self._db.dialect
        async with self._db.transaction() as conn:
            ids = [r.invocation_id for r in requests]
            held = frozenset() if alone else await dialect.held_rows(conn, ids)
            free = [r for r in requests if r.invocation_id not in held]
            if not free:  # every row is held elsewhere: each is written alone, next
                return {}
            now = float(await conn.scalar(sa.select(self._db.now)) or 0.0)
            records = {r.invocation_id: _records(r.waits, now) for r in free}
            batches = {r.invocation_id: _events(r, records[r.invocation_id]) for r in free}
            counts = [(r.invocation_id, r.attempt, len(batches[r.invocation_id])) for r in free]
            parked = {
                row.id: row.last_event_id
                for row in await conn.execute(
                    _park_statement(dialect.carriage),
                    COUNTS.params(counts, carriage=dialect.carriage),
                )
            }
            refused = [r for r in free if r.invocation_id not in parked]
            cancelling = await _cancelling(conn, refused) if refused else frozenset()
            await _insert_waits(conn, dialect, {i: records[i] for i in parked}, now)
            stored = {i: numbered(last, batches[i]) for i, last in parked.items()}
            await insert_events(conn, dialect, stored)
        results: dict[int, ParkResult] = {}
        for n, request in enumerate(requests):
            key = request.invocation_id
            if key in stored:
                results[n] = stored[key]
            elif key in cancelling:
                results[n] = CancelPending(key)
            elif key not in held:
                results[n] = Superseded(key)
        return results


def _records(new_waits: Sequence[NewWait], now: float) -> list[WaitRecord]:
    return [
        WaitRecord(
            name=w.name,
            kind=w.kind,
            details=w.details,
            wake_at=None if w.wake_in is None else now + w.wake_in,
            value=None,
            resolution=None,
        )
        for w in new_waits
    ]


def _events(request: ParkRequest, records: list[WaitRecord]) -> list[NewEvent]:
    """What a park appends: the attempt's buffered events, then ``run.waiting``."""
    return [*request.pending, NewEvent(RUN_WAITING, waiting_data([w.entry() for w in records]))]


async def _cancelling(conn: Connection, refused: Sequence[ParkRequest]) -> frozenset[str]:
    """The refused parks whose attempt still owns its row: refused for a requested cancel."""
    owned = sa.tuple_(inv.id, inv.attempt).in_([(r.invocation_id, r.attempt) for r in refused])
    rows = await conn.execute(
        sa.select(inv.id).where(
            owned, status_is(inv.status, Status.ACTIVE), inv.cancel_requested.is_(True)
        )
    )
    return frozenset(str(row.id) for row in rows)


async def _insert_waits(
    conn: Connection, dialect: Dialect, parked: dict[str, list[WaitRecord]], now: float
) -> None:
    """The parked attempts' waits (a name already recorded, by an earlier attempt, is kept)."""
    rows = [
        {
            "invocation_id": invocation_id,
            "name": w.name,
            "kind": w.kind.value,
            "details": w.details,
            "wake_at": w.wake_at,
            "created_at": now,
        }
        for invocation_id, records in parked.items()
        for w in records
    ]
    if rows:
        await conn.execute(dialect.insert_new(waits, "invocation_id", "name"), rows)


@functools.cache
def _park_statement(carriage: Carriage) -> sa.Update:
    """Each row ``active → waiting`` under its attempt, its log advanced past its events,
    unless its cancel was requested."""
    return (
        advance_statement(carriage)
        .where(inv.cancel_requested.is_(False))
        .values(status=Status.WAITING.value, worker=None)
    )


def _invocation_id(request: ParkRequest) -> str:
    return request.invocation_id
