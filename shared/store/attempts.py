"""The worker's side of the store: an attempt's writes, after its claim
(:mod:`tether.store.claims`) to its end.

Every write after the claim is fenced: it only lands while the row is still ``active`` under the
attempt's number. A superseded attempt gets :class:`Superseded` and must stop.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from tether.events import Event
from tether.store.batching import write_batch
from tether.store.bound import BoundBatch, Carriage
from tether.store.connection import Connection
from tether.store.dialect import Dialect
from tether.store.endings import Ending, write_endings
from tether.store.engine import Database
from tether.store.errors import StoreError, Superseded
from tether.store.eventlog import advanced, insert_events, numbered
from tether.store.schema import HANDED_BACK, Status, invocations, status_is
from tether.store.writes import AppendRequest, Finished, FinishRequest

inv = invocations.c
HEARTBEAT_CHUNK = 64
"""Attempts per heartbeat transaction (:meth:`Attempts.heartbeat`)."""


class Attempts:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def append_many(
        self, requests: Sequence[AppendRequest]
    ) -> list[list[Event] | Superseded | StoreError]:
        """Append each attempt's events under its fence; cursors continue the log."""
        return await write_batch(requests, _invocation_id, self._append)

    async def _append(
        self, requests: Sequence[AppendRequest], alone: bool
    ) -> dict[int, list[Event] | Superseded]:
        async with self._db.transaction() as conn:
            held = await self._held(conn, [r.invocation_id for r in requests], alone)
            free = [r for r in requests if r.invocation_id not in held]
            last = await _advance_logs(conn, self._db.dialect, free) if free else {}
            stored = {
                r.invocation_id: numbered(last[r.invocation_id], r.events)
                for r in free
                if r.invocation_id in last
            }
            await insert_events(conn, self._db.dialect, stored)
        return {
            n: stored.get(r.invocation_id, Superseded(r.invocation_id))
            for n, r in enumerate(requests)
            if r.invocation_id not in held
        }

    async def finish_many(
        self, requests: Sequence[FinishRequest]
    ) -> list[Finished | Superseded | StoreError]:
        """End each attempt under its fence: its outcome, after the events it still buffered."""
        return await write_batch(requests, _invocation_id, self._finish)

    async def _finish(
        self, requests: Sequence[FinishRequest], alone: bool
    ) -> dict[int, Finished | Superseded]:
        async with self._db.transaction() as conn:
            held = await self._held(conn, [r.invocation_id for r in requests], alone)
            free = [r for r in requests if r.invocation_id not in held]
            ended = await write_endings(conn, self._db.dialect, [Ending.of(r) for r in free])
        by_id = {r.invocation_id: f for r, f in zip(free, ended, strict=True)}
        return {
            n: by_id[r.invocation_id] or Superseded(r.invocation_id)
            for n, r in enumerate(requests)
            if r.invocation_id not in held
        }

    async def _held(
        self, conn: Connection, invocation_ids: Sequence[str], alone: bool
    ) -> frozenset[str]:
        """The rows another transaction holds, for a grouped write; a lone write waits."""
        if alone:
            return frozenset()
        return await self._db.dialect.held_rows(conn, invocation_ids)

    async def save_checkpoint(self, invocation_id: str, attempt: int, state: Any) -> None:
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.update(invocations)
                .where(*fence(invocation_id, attempt))
                .values(checkpoint=state)
            )
        if result.rowcount == 0:
            raise Superseded(invocation_id)

    async def heartbeat(
        self,
        attempts: Sequence[tuple[str, int]],
        claiming: bool = False,
        worker: str = "",
        abandoned: Sequence[tuple[str, int]] = (),
    ) -> dict[str, bool]:
        """Beat for every attempt this process runs; returns id → cancel flag for the live ones.

        ``claiming``: a claim by ``worker`` is in flight. It can commit while the claimer's event
        loop is blocked, before its attempts are registered (their ids are not known yet);
        beating ``worker``'s active rows keeps them from looking dead meanwhile. One it
        ``abandoned`` (its finish failed) is left to go stale, and a row handed back
        (``heartbeat_at`` 0 or :data:`HANDED_BACK`: released, or its worker declared dead)
        stays handed back even
        when this beat read its attempts before the hand-back: it is not live any more.

        The attempts are beaten :data:`HEARTBEAT_CHUNK` at a time, each chunk in a transaction
        of its own: a row an update has written stays locked until its transaction ends, and
        an event appended meanwhile waits for it (500 rows in one statement held 500 streams'
        next events for tens of milliseconds, the tail of their delivery).
        """
        chunks = [
            attempts[start : start + HEARTBEAT_CHUNK]
            for start in range(0, len(attempts), HEARTBEAT_CHUNK)
        ]
        alive: dict[str, bool] = {}
        for n, chunk in enumerate(chunks or [()]):
            alive.update(await self._beat(chunk, claiming and n == 0, worker, abandoned))
        return alive

    async def _beat(
        self,
        attempts: Sequence[tuple[str, int]],
        claiming: bool,
        worker: str,
        abandoned: Sequence[tuple[str, int]],
    ) -> dict[str, bool]:
        mine: list[sa.ColumnElement[bool]] = []
        if attempts:
            mine.append(sa.tuple_(inv.id, inv.attempt).in_(list(attempts)))
        if claiming and worker:
            claimed = inv.worker == worker
            if abandoned:
                claimed = sa.and_(claimed, ~sa.tuple_(inv.id, inv.attempt).in_(list(abandoned)))
            mine.append(claimed)
        if not mine:
            return {}
        async with self._db.transaction() as conn:
            rows = await conn.execute(
                sa.update(invocations)
                .where(status_is(inv.status, Status.ACTIVE), inv.heartbeat_at > 0, sa.or_(*mine))
                .values(heartbeat_at=self._db.now)
                .returning(inv.id, inv.cancel_requested)
            )
            return {r.id: bool(r.cancel_requested) for r in rows}

    async def release(self, invocation_id: str, attempt: int, *, stopping: bool) -> None:
        """Hand an attempt back: it looks stale to the next reap pass. ``stopping``: its worker
        is shutting down (:data:`HANDED_BACK`, not a crash); else it was declared dead."""
        fenced = fence(invocation_id, attempt)
        if stopping:  # not over a verdict of dead (0): that one stays a crash
            fenced = (*fenced, inv.heartbeat_at > 0)
        async with self._db.transaction() as conn:
            await conn.execute(
                sa.update(invocations)
                .where(*fenced)
                .values(heartbeat_at=HANDED_BACK if stopping else 0.0)
            )


def fence(invocation_id: str, attempt: int) -> tuple[sa.ColumnElement[bool], ...]:
    """The row as long as ``attempt`` still owns it."""
    return (inv.id == invocation_id, inv.attempt == attempt, status_is(inv.status, Status.ACTIVE))


def _invocation_id(request: AppendRequest | FinishRequest) -> str:
    return request.invocation_id


COUNTS = BoundBatch(
    "counts",
    (sa.column("id", sa.Text), sa.column("attempt", sa.Integer), sa.column("events", sa.Integer)),
)


async def _advance_logs(
    conn: Connection, dialect: Dialect, requests: Sequence[AppendRequest]
) -> dict[str, int]:
    """Advance each attempt's log past its events, under its fence: the new last cursors."""
    rows = [(r.invocation_id, r.attempt, len(r.events)) for r in requests]
    advance = advance_statement(dialect.carriage)
    params = COUNTS.params(rows, carriage=dialect.carriage)
    return {row.id: row.last_event_id for row in await conn.execute(advance, params)}


@functools.cache
def advance_statement(carriage: Carriage) -> sa.Update:
    counts = COUNTS.cte(carriage)
    return (
        sa.update(invocations)
        .where(
            inv.id == counts.c.id,
            inv.attempt == counts.c.attempt,
            status_is(inv.status, Status.ACTIVE),
        )
        .values(last_event_id=advanced(counts.c.events))
        .returning(inv.id, inv.last_event_id)
    )
