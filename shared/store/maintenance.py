"""The reaper's side of the store: dead attempts, lost messages, expired invocations, and the
audit of the open counts.

Every query is safe to run from many reapers at once: each transition is a conditional update
that only one of them wins, and an audit writes a count only under its row's lock. (A dead
attempt that gets no replacement is ended through the attempt's own finish, with
``FinishRequest.stale_after``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from tether.store.attempts import fence
from tether.store.connection import Connection
from tether.store.engine import Database
from tether.store.opencounts import Key, correct, lock_counts, suspects
from tether.store.schema import (
    CRASH,
    TERMINAL_VALUES,
    StaleAttempt,
    Status,
    events,
    invocations,
    status_is,
    steps,
    waits,
)

inv = invocations.c


@dataclass(frozen=True, slots=True)
class Queued:
    invocation_id: str
    seq: int
    delay: float
    """Seconds before it is due: a replacement waiting out its backoff; 0 for the rest."""


@dataclass(frozen=True, slots=True)
class Expired:
    """What one retention transaction deleted."""

    invocations: int
    """Invocations deleted with all their rows."""
    events: int
    """Event rows deleted (an invocation's too many for one transaction go over several)."""
    more: bool
    """Whether more may be expired: the batch was full, or stopped at its event budget."""


AUDIT_KEYS = 1000
"""The most keys one audit counts again; the rest wait for the next."""
AUDIT_BATCH = 50
"""Keys counted again in one transaction, each holding its count row until it ends."""


class Maintenance:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def audit_open_counts(self, limit: int = AUDIT_KEYS) -> list[Key]:
        """Count again the open rows of the keys whose count differs from them (up to
        ``limit``), each under its count row's lock, and write the true figures
        (:mod:`.opencounts`); the keys that had drifted, each logged."""
        async with self._db.snapshot() as conn:
            keys = (await suspects(conn))[:limit]
        drifted: list[Key] = []
        for start in range(0, len(keys), AUDIT_BATCH):
            batch = keys[start : start + AUDIT_BATCH]
            async with self._db.transaction() as conn:
                counts = await lock_counts(conn, self._db.dialect, batch)
                true = await correct(conn, counts, batch)
            drifted += [key for key in batch if counts[key] != true[key]]
        return drifted

    async def stale_attempts(self, stale_after: float, limit: int = 100) -> list[StaleAttempt]:
        """Active attempts that have not beaten for ``stale_after`` seconds, oldest first.

        No index holds ``heartbeat_at`` (every beat would write one entry a row into each of
        the table's indexes: migration 0010); the active rows, one a worker slot at most, are
        read through their partial index and compared with a cutoff read once (the clock is
        volatile: compared row by row, it would be read for each)."""
        cutoff = sa.select(self._db.now - stale_after).scalar_subquery()
        query = (
            sa.select(inv.id, inv.attempt, inv.cancel_requested, inv.crashes)
            .where(status_is(inv.status, Status.ACTIVE), inv.heartbeat_at < cutoff)
            .order_by(inv.heartbeat_at)
            .limit(limit)
        )
        async with self._db.connection() as conn:
            rows = (await conn.execute(query)).all()
        return [StaleAttempt(r.id, r.attempt, bool(r.cancel_requested), r.crashes) for r in rows]

    async def requeue_for_recovery(
        self, invocation_id: str, attempt: int, stale_after: float, delay: float
    ) -> bool:
        """Put a dead attempt's invocation back in the queue for a replacement attempt."""
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.update(invocations)
                .where(
                    *fence(invocation_id, attempt),
                    inv.heartbeat_at < self._db.now - stale_after,
                )
                .values(
                    status=Status.QUEUED.value,
                    worker=None,
                    enqueued_at=self._db.now + delay,
                    resumed_by=CRASH,
                    crashes=inv.crashes + 1,
                )
            )
        return result.rowcount == 1

    async def release_active(self) -> int:
        """Hand back every active attempt (``heartbeat_at = 0``), so the next reap pass replaces
        them at once. Only for a database this process alone serves: ``tether dev`` at start,
        holding its file's lock, knows every active attempt there is a dead predecessor's."""
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.update(invocations)
                .where(status_is(inv.status, Status.ACTIVE))
                .values(heartbeat_at=0.0)
            )
        return int(result.rowcount)

    async def take_unclaimed(self, older_than: float, limit: int = 500) -> list[str]:
        """Queued invocations nobody claimed for ``older_than`` s; marks them re-enqueued now.

        The cutoff is read once (a scalar subquery: the clock is volatile, so compared row by
        row it could not bound an index scan) and the oldest come first by ``enqueued_at``, so
        the partial index on queued rows answers "none overdue" at once, whatever the backlog
        (500,000 queued: 0.05 ms, against 160-220 ms walking ``seq``)."""
        cutoff = sa.select(self._db.now - older_than).scalar_subquery()
        overdue = sa.and_(status_is(inv.status, Status.QUEUED), inv.enqueued_at < cutoff)
        oldest = sa.select(inv.id).where(overdue).order_by(inv.enqueued_at).limit(limit)
        async with self._db.transaction() as conn:
            ids = list((await conn.execute(oldest)).scalars().all())
            if not ids:
                return []
            rows = await conn.execute(
                sa.update(invocations)
                .where(overdue, inv.id.in_(ids))
                .values(enqueued_at=self._db.now)
                .returning(inv.id)
            )
            return list(rows.scalars().all())

    async def queued_page(self, after_seq: int, limit: int = 500) -> list[Queued]:
        """Queued invocations past ``after_seq``, in order, with the delay left before each is
        due (a replacement's backoff), for re-sending what the broker lost."""
        query = (
            sa.select(inv.id, inv.seq, (inv.enqueued_at - self._db.now).label("delay"))
            .where(status_is(inv.status, Status.QUEUED), inv.seq > after_seq)
            .order_by(inv.seq)
            .limit(limit)
        )
        async with self._db.connection() as conn:
            rows = (await conn.execute(query)).all()
        return [Queued(r.id, r.seq, max(0.0, float(r.delay))) for r in rows]

    async def mark_resent(self, invocation_ids: Sequence[str]) -> list[str]:
        """Those of ``invocation_ids`` still queued and due, re-enqueued now: the
        ``requeue_after`` rule then waits a whole period before sending them again."""
        if not invocation_ids:
            return []
        async with self._db.transaction() as conn:
            rows = await conn.execute(
                sa.update(invocations)
                .where(
                    inv.id.in_(list(invocation_ids)),
                    status_is(inv.status, Status.QUEUED),
                    inv.enqueued_at <= self._db.now,
                )
                .values(enqueued_at=self._db.now)
                .returning(inv.id)
            )
            return list(rows.scalars().all())

    async def delete_expired(
        self, retention: float, limit: int = 500, max_events: int | None = None
    ) -> Expired:
        """Delete the terminal invocations finished before the retention period, oldest first:
        up to ``limit`` of them while their events fit in ``max_events`` (None: no bound);
        where the oldest alone has more, its oldest ``max_events`` events (and the rest of it
        once they were its last). Readers of an invocation going over several transactions see
        its log begin later meanwhile."""
        expired = (
            sa.select(inv.id, inv.last_event_id)
            .where(
                status_is(inv.status, *TERMINAL_VALUES), inv.finished_at < self._db.now - retention
            )
            .order_by(inv.finished_at)
            .limit(limit)
        )
        async with self._db.transaction() as conn:
            rows = (await conn.execute(expired)).all()
            if not rows:
                return Expired(0, 0, more=False)
            fitting = [r.id for r in rows] if max_events is None else _fitting(rows, max_events)
            # PostgreSQL: the chosen rows another reaper's transaction holds are left to it
            held = await _held(conn, fitting or [rows[0].id])
            deleted = 0
            if not fitting and max_events is not None:  # the oldest alone has more events
                if not held:
                    return Expired(0, 0, more=True)
                oldest = held[0]
                deleted = await _delete_oldest_events(conn, oldest, max_events)
                if deleted == max_events and await _has_events(conn, oldest):
                    return Expired(0, deleted, more=True)  # the next transaction goes on
            for table in (events, steps, waits):
                gone = await conn.execute(sa.delete(table).where(table.c.invocation_id.in_(held)))
                deleted += int(gone.rowcount) if table is events else 0
            await conn.execute(sa.delete(invocations).where(inv.id.in_(held)))
        more = len(rows) == limit or len(held) < len(rows)
        return Expired(len(held), deleted, more)


def _fitting(rows: Sequence[Any], max_events: int) -> list[str]:
    """The ids of the oldest rows whose events (``last_event_id`` counts them, or more once some
    went) fit in ``max_events`` together, up to the first that does not."""
    ids: list[str] = []
    room = max_events
    for row in rows:
        if row.last_event_id > room:
            break
        ids.append(row.id)
        room -= row.last_event_id
    return ids


async def _delete_oldest_events(conn: Connection, invocation_id: str, count: int) -> int:
    """Delete the ``count`` oldest events of one invocation; how many went."""
    of_it = events.c.invocation_id == invocation_id
    oldest = sa.select(events.c.cursor).where(of_it).order_by(events.c.cursor).limit(count)
    gone = await conn.execute(sa.delete(events).where(of_it, events.c.cursor.in_(oldest)))
    return int(gone.rowcount)


async def _has_events(conn: Connection, invocation_id: str) -> bool:
    of_it = sa.select(events.c.cursor).where(events.c.invocation_id == invocation_id).limit(1)
    return (await conn.execute(of_it)).first() is not None


async def _held(conn: Connection, ids: list[str]) -> list[str]:
    """Lock the rows of ``ids`` still there and not locked by another transaction (PostgreSQL;
    SQLite's one writer holds them all already); those ids, in their order."""
    lock = sa.select(inv.id).where(inv.id.in_(ids)).with_for_update(skip_locked=True)
    got = set((await conn.execute(lock)).scalars().all())
    return [i for i in ids if i in got]
