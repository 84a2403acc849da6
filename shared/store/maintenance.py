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
    HANDED_BACK,
    TERMINAL_VALUES,
    StaleAttempt,
    Status,
    events,
    forgotten_turns,
    invocations,
    status_is,
    steps,
    thread_messages,
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
    """Whether more may be expired: the batch was full, stopped at its event budget, or left
    rows another transaction held."""


EXPIRED_INVOCATIONS = 500
"""Most expired invocations one retention transaction deletes."""
EXPIRED_EVENTS = 5_000
"""Most event rows one retention transaction deletes: expired invocations go whole while their
events fit; one with more alone goes over several transactions, its oldest events first, its
row (with its steps and waits) with the last of them. Unbounded, a transaction of invocations
that stream thousands of events each held ``tether dev``'s one loop for ~0.3 s
(docs/performance.md, "Retention of chatty invocations")."""


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
            sa.select(inv.id, inv.attempt, inv.cancel_requested, inv.crashes, inv.heartbeat_at)
            .where(status_is(inv.status, Status.ACTIVE), inv.heartbeat_at < cutoff)
            .order_by(inv.heartbeat_at)
            .limit(limit)
        )
        async with self._db.connection() as conn:
            rows = (await conn.execute(query)).all()
        return [
            StaleAttempt(
                r.id, r.attempt, bool(r.cancel_requested), r.crashes, r.heartbeat_at == HANDED_BACK
            )
            for r in rows
        ]

    async def requeue_for_recovery(
        self,
        invocation_id: str,
        attempt: int,
        stale_after: float,
        delay: float,
        *,
        crash: bool = True,
    ) -> bool:
        """Put a dead attempt's invocation back in the queue for a replacement attempt;
        ``crash``: counted as one (not for one a stopping worker handed back).

        Not once a cancel was requested: the reaper decided on a read that may predate the
        flag, and its next pass ends the invocation cancelled instead."""
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.update(invocations)
                .where(
                    *fence(invocation_id, attempt),
                    inv.heartbeat_at < self._db.now - stale_after,
                    inv.cancel_requested.is_(False),
                )
                .values(
                    status=Status.QUEUED.value,
                    worker=None,
                    enqueued_at=self._db.now + delay,
                    resumed_by=CRASH,
                    crashes=inv.crashes + (1 if crash else 0),
                )
            )
        return result.rowcount == 1

    async def release_active(self) -> int:
        """Hand back every active attempt (``heartbeat_at = 0``), so the next reap pass replaces
        them at once. Only for a database this process alone serves: ``tether dev`` at start,
        holding its file's lock, knows every active attempt there is a dead predecessor's
        (those it handed back as it stopped stay so: no crash)."""
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.update(invocations)
                .where(status_is(inv.status, Status.ACTIVE), inv.heartbeat_at != HANDED_BACK)
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
        self,
        retention: float,
        limit: int | None = None,
        max_events: int | None = None,
    ) -> Expired:
        """Delete the terminal invocations finished before the retention period, oldest first:
        up to ``limit`` of them while their events fit in ``max_events``; where the oldest alone
        has more, its oldest ``max_events`` events (and the rest of it once they were its last).
        Readers of an invocation going over several transactions see its log begin later
        meanwhile. On PostgreSQL the rows another transaction holds are skipped, so reapers at
        once delete different invocations. Unset bounds: :data:`EXPIRED_INVOCATIONS` and
        :data:`EXPIRED_EVENTS`."""
        limit = EXPIRED_INVOCATIONS if limit is None else limit
        max_events = EXPIRED_EVENTS if max_events is None else max(1, max_events)  # progress
        cutoff = sa.select(self._db.now - retention).scalar_subquery()  # once: the clock is
        expired = sa.and_(  # volatile, and compared row by row it would not bound the scan
            status_is(inv.status, *TERMINAL_VALUES), inv.finished_at < cutoff
        )
        oldest = sa.select(inv.id, inv.last_event_id).where(expired).order_by(inv.finished_at)
        async with self._db.transaction() as conn:
            seen = (await conn.execute(oldest.limit(limit))).all()
            if not seen:
                return Expired(0, 0, more=False)
            # Lock only as many as this transaction may delete (SKIP LOCKED: those another
            # reaper holds give way to the next ones), then fit what was locked.
            wanted = len(_fitting(seen, max_events)) or 1
            locked = (
                await conn.execute(oldest.limit(wanted).with_for_update(skip_locked=True))
            ).all()
            if not locked:  # every one is another reaper's now
                return Expired(0, 0, more=False)
            whole = _fitting(locked, max_events)
            events_deleted = 0
            if not whole:  # the oldest alone has more events than a transaction
                first = locked[0].id
                events_deleted = await _delete_oldest_events(conn, first, max_events)
                if events_deleted == max_events and await _has_events(conn, first):
                    return Expired(0, events_deleted, more=True)  # the next one goes on
                whole = [first]
            for table in (events, steps, waits, forgotten_turns):
                gone = await conn.execute(sa.delete(table).where(table.c.invocation_id.in_(whole)))
                events_deleted += int(gone.rowcount) if table is events else 0
            await conn.execute(_retired_turns(whole))
            await conn.execute(sa.delete(invocations).where(inv.id.in_(whole)))
        more = len(seen) == limit or len(whole) < len(seen)
        return Expired(len(whole), events_deleted, more)


def _retired_turns(invocation_ids: list[str]) -> sa.Update:
    """The deleted invocations' thread messages stay in their threads, keyed by a name no
    accepted id can take and no later expiry repeats (``expired:<seq>:<id>``: ids are UUIDs,
    and an invocation's ``seq`` is never reused): the id is free again, and a turn accepted
    under it later writes its own messages (``(invocation_id, position)`` is their key), sees
    these as history, and expires in turn."""
    msg = thread_messages.c
    seq = sa.select(sa.cast(inv.seq, sa.Text)).where(inv.id == msg.invocation_id)
    return (
        sa.update(thread_messages)
        .where(msg.invocation_id.in_(invocation_ids))
        .values(
            invocation_id=sa.literal(EXPIRED_TURN)
            + seq.scalar_subquery()
            + sa.literal(":")
            + msg.invocation_id
        )
    )


EXPIRED_TURN = "expired:"


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
