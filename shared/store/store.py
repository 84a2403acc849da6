"""The one seam to the database: every query Tether runs, on PostgreSQL or the embedded SQLite.

Every write an attempt makes is fenced: it only lands while the row is still ``active`` under
that attempt number. A superseded attempt gets :class:`Superseded` and must stop.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shared.events import RUN_CANCELLED, RUN_STARTED, Event
from shared.store.engine import create_engine
from shared.store.migrate import migrate
from shared.store.schema import (
    INVOCATION_COLUMNS,
    OPEN,
    TERMINAL,
    Claim,
    Invocation,
    NewInvocation,
    StaleAttempt,
    Status,
    events,
    invocations,
)

inv = invocations.c
TERMINAL_VALUES = tuple(s.value for s in TERMINAL)


class Superseded(Exception):
    """The attempt no longer owns its invocation (replaced, finished or cancelled)."""


class Conflict(Exception):
    """The id was already used for a different request (or by another owner)."""


class OwnerLimitReached(Exception):
    """The owner already has the maximum number of unfinished invocations."""


@dataclass(frozen=True, slots=True)
class Accepted:
    invocation: Invocation
    created: bool


@dataclass(frozen=True, slots=True)
class Finished:
    """A terminal transition: the events it appended and who may run next in the session."""

    events: list[Event]
    successor_id: str | None


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ends."""

    status: Status
    event: Event
    output: Any = None
    error_code: str | None = None
    error_message: str | None = None


class Store:
    """Async access to invocations and events over one SQLAlchemy engine."""

    def __init__(self, engine: AsyncEngine, *, temporary_file: Path | None = None) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._temporary_file = temporary_file
        if self.dialect == "postgresql":
            self._now: sa.ColumnElement[float] = sa.literal_column(
                "extract(epoch from clock_timestamp())::double precision", sa.Float
            )
        else:
            self._now = sa.literal_column("((julianday('now') - 2440587.5) * 86400.0)", sa.Float)

    @classmethod
    def postgres(cls, url: str, *, pool_size: int = 10) -> Store:
        return cls(create_engine(url, pool_size=pool_size))

    @classmethod
    def embedded(cls, path: str) -> Store:
        """SQLite at ``path``; ``:memory:`` gives a throwaway file removed on close."""
        temporary = None
        if path == ":memory:":
            handle, name = tempfile.mkstemp(prefix="tether-", suffix=".db")
            Path(name).unlink()
            temporary = Path(name)
            path = name
        return cls(create_engine(f"sqlite+aiosqlite:///{path}"), temporary_file=temporary)

    def sibling(self) -> Store:
        """A second store on the same database with its own connections (for another thread)."""
        return Store(create_engine(self.engine.url, pool_size=1))

    async def migrate(self) -> list[str]:
        return await migrate(self.engine)

    async def close(self) -> None:
        await self.engine.dispose()
        if self._temporary_file is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self._temporary_file}{suffix}").unlink(missing_ok=True)

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    # -- the gateway's side ---------------------------------------------------------------

    def _insert(self) -> Any:
        return (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(invocations)

    async def accept(self, new: NewInvocation, *, max_open_per_owner: int = 0) -> Accepted:
        """Insert a new invocation, or return the existing one for a repeated request."""
        async with self.engine.begin() as conn:
            inserted = await conn.execute(
                self._insert()
                .values(
                    id=new.id,
                    owner=new.owner,
                    session_id=new.session_id,
                    input=new.input,
                    request_hash=new.request_hash,
                    status=Status.QUEUED.value,
                    attempt=0,
                    cancel_requested=False,
                    last_event_id=0,
                    created_at=self._now,
                    enqueued_at=self._now,
                )
                .on_conflict_do_nothing(index_elements=["id"])
                .returning(*INVOCATION_COLUMNS)
            )
            row = inserted.mappings().first()
            if row is not None:
                if max_open_per_owner and await self._open_count(conn, new.owner, max_open_per_owner + 1) > max_open_per_owner:
                    await conn.rollback()
                    raise OwnerLimitReached(new.owner)
                return Accepted(Invocation.from_row(row), created=True)
            existing = await self._get(conn, new.id)
        if existing is None:  # deleted by retention between the two statements
            return await self.accept(new, max_open_per_owner=max_open_per_owner)
        if existing.owner != new.owner or existing.request_hash != new.request_hash:
            raise Conflict(new.id)
        return Accepted(existing, created=False)

    async def _open_count(self, conn: AsyncConnection, owner: str, cap: int) -> int:
        open_rows = (
            sa.select(sa.literal(1))
            .where(inv.owner == owner, inv.status.in_(OPEN))
            .limit(cap)
            .subquery()
        )
        return int(await conn.scalar(sa.select(sa.func.count()).select_from(open_rows)) or 0)

    async def _get(self, conn: AsyncConnection, invocation_id: str) -> Invocation | None:
        result = await conn.execute(sa.select(*INVOCATION_COLUMNS).where(inv.id == invocation_id))
        row = result.mappings().first()
        return Invocation.from_row(row) if row is not None else None

    async def get(self, invocation_id: str) -> Invocation | None:
        async with self.engine.connect() as conn:
            return await self._get(conn, invocation_id)

    async def list_owned(
        self,
        owner: str,
        *,
        status: Status | None = None,
        session_id: str | None = None,
        before_seq: int | None = None,
        limit: int = 50,
    ) -> list[Invocation]:
        """The owner's invocations, newest first, ``before_seq`` as the page cursor."""
        query = sa.select(*INVOCATION_COLUMNS).where(inv.owner == owner)
        if status is not None:
            query = query.where(inv.status == status.value)
        if session_id is not None:
            query = query.where(inv.session_id == session_id)
        if before_seq is not None:
            query = query.where(inv.seq < before_seq)
        query = query.order_by(inv.seq.desc()).limit(limit)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [Invocation.from_row(r) for r in rows]

    async def events_after(self, invocation_id: str, after: int, limit: int = 1000) -> list[Event]:
        query = (
            sa.select(events.c.cursor, events.c.type, events.c.data)
            .where(events.c.invocation_id == invocation_id, events.c.cursor > after)
            .order_by(events.c.cursor)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [Event(r.cursor, r.type, r.data) for r in rows]

    async def count_queued(self) -> int:
        async with self.engine.connect() as conn:
            query = sa.select(sa.func.count()).where(inv.status == Status.QUEUED.value)
            return int(await conn.scalar(query) or 0)

    async def request_cancel(self, invocation_id: str) -> Finished | None:
        """Cancel a queued invocation at once, or flag an active one for its worker.

        Returns the terminal transition when a queued invocation was cancelled here.
        """
        async with self.engine.begin() as conn:
            cancelled = await self._finish(
                conn,
                sa.and_(inv.id == invocation_id, inv.status == Status.QUEUED.value),
                Outcome(Status.CANCELLED, Event(0, RUN_CANCELLED, {"type": RUN_CANCELLED})),
            )
            if cancelled is not None:
                return cancelled
            await conn.execute(
                sa.update(invocations)
                .where(inv.id == invocation_id, inv.status == Status.ACTIVE.value)
                .values(cancel_requested=True)
            )
        return None

    # -- the worker's side ----------------------------------------------------------------

    async def claim(self, invocation_id: str, worker: str) -> Claim | None:
        """Start the next attempt if the invocation is queued and heads its session."""
        older = invocations.alias("older")
        blocked_by_older = sa.exists().where(
            older.c.owner == inv.owner,
            older.c.session_id == inv.session_id,
            older.c.seq < inv.seq,
            older.c.status.in_(OPEN),
        )
        claim = (
            sa.update(invocations)
            .where(
                inv.id == invocation_id,
                inv.status == Status.QUEUED.value,
                sa.or_(inv.session_id.is_(None), ~blocked_by_older),
            )
            .values(
                status=Status.ACTIVE.value,
                attempt=inv.attempt + 1,
                started_at=sa.func.coalesce(inv.started_at, self._now),
                heartbeat_at=self._now,
                worker=worker,
                last_event_id=inv.last_event_id + 1,
            )
            .returning(inv.attempt, inv.input, inv.session_id, inv.checkpoint, inv.last_event_id)
        )
        try:
            async with self.engine.begin() as conn:
                row = (await conn.execute(claim)).first()
                if row is None:
                    return None
                data = {"type": RUN_STARTED, "attempt": row.attempt}
                await self._insert_events(conn, invocation_id, [Event(row.last_event_id, RUN_STARTED, data)])
        except sa.exc.IntegrityError:  # a racing claim took the session's one active slot
            return None
        return Claim(invocation_id, row.attempt, row.input, row.session_id, row.checkpoint, row.last_event_id)

    async def append_events(
        self, invocation_id: str, attempt: int, batch: Sequence[tuple[str, Any]]
    ) -> list[Event]:
        """Append events under the attempt's fence; cursors continue the invocation's log."""
        async with self.engine.begin() as conn:
            last = await conn.scalar(
                sa.update(invocations)
                .where(*self._fence(invocation_id, attempt))
                .values(last_event_id=inv.last_event_id + len(batch))
                .returning(inv.last_event_id)
            )
            if last is None:
                raise Superseded(invocation_id)
            first = last - len(batch) + 1
            stored = [Event(first + i, t, d) for i, (t, d) in enumerate(batch)]
            await self._insert_events(conn, invocation_id, stored)
        return stored

    async def save_checkpoint(self, invocation_id: str, attempt: int, state: Any) -> None:
        async with self.engine.begin() as conn:
            result = await conn.execute(
                sa.update(invocations)
                .where(*self._fence(invocation_id, attempt))
                .values(checkpoint=state)
            )
            if result.rowcount == 0:
                raise Superseded(invocation_id)

    async def finish(
        self,
        invocation_id: str,
        attempt: int,
        outcome: Outcome,
        pending: Sequence[tuple[str, Any]] = (),
        *,
        stale_after: float | None = None,
    ) -> Finished:
        """End an attempt (fenced); ``stale_after`` limits it to attempts that stopped beating."""
        condition = sa.and_(*self._fence(invocation_id, attempt))
        if stale_after is not None:
            condition = sa.and_(condition, inv.heartbeat_at < self._now - stale_after)
        async with self.engine.begin() as conn:
            finished = await self._finish(conn, condition, outcome, pending)
        if finished is None:
            raise Superseded(invocation_id)
        return finished

    async def _finish(
        self,
        conn: AsyncConnection,
        condition: sa.ColumnElement[bool],
        outcome: Outcome,
        pending: Sequence[tuple[str, Any]] = (),
    ) -> Finished | None:
        count = len(pending) + 1
        row = (
            await conn.execute(
                sa.update(invocations)
                .where(condition)
                .values(
                    status=outcome.status.value,
                    output=outcome.output,
                    error_code=outcome.error_code,
                    error_message=outcome.error_message,
                    finished_at=self._now,
                    last_event_id=inv.last_event_id + count,
                )
                .returning(inv.id, inv.owner, inv.session_id, inv.last_event_id)
            )
        ).first()
        if row is None:
            return None
        first = row.last_event_id - count + 1
        batch = [*pending, (outcome.event.type, outcome.event.data)]
        stored = [Event(first + i, t, d) for i, (t, d) in enumerate(batch)]
        await self._insert_events(conn, row.id, stored)
        successor = None
        if row.session_id is not None:
            successor = await conn.scalar(
                sa.select(inv.id)
                .where(
                    inv.owner == row.owner,
                    inv.session_id == row.session_id,
                    inv.status == Status.QUEUED.value,
                )
                .order_by(inv.seq)
                .limit(1)
            )
        return Finished(stored, successor)

    def _fence(self, invocation_id: str, attempt: int) -> tuple[sa.ColumnElement[bool], ...]:
        return (inv.id == invocation_id, inv.attempt == attempt, inv.status == Status.ACTIVE.value)

    async def _insert_events(self, conn: AsyncConnection, invocation_id: str, batch: Sequence[Event]) -> None:
        await conn.execute(
            events.insert().values(created_at=self._now),
            [{"invocation_id": invocation_id, "cursor": e.cursor, "type": e.type, "data": e.data} for e in batch],
        )

    async def heartbeat(self, attempts: Sequence[tuple[str, int]]) -> dict[str, bool]:
        """Beat for every attempt this process runs; returns id → cancel requested, for the live ones."""
        if not attempts:
            return {}
        async with self.engine.begin() as conn:
            rows = await conn.execute(
                sa.update(invocations)
                .where(
                    inv.status == Status.ACTIVE.value,
                    sa.tuple_(inv.id, inv.attempt).in_(list(attempts)),
                )
                .values(heartbeat_at=self._now)
                .returning(inv.id, inv.cancel_requested)
            )
            return {r.id: bool(r.cancel_requested) for r in rows}

    async def release(self, invocation_id: str, attempt: int) -> None:
        """A stopping worker hands an attempt back: it looks stale to the next reap pass."""
        async with self.engine.begin() as conn:
            await conn.execute(
                sa.update(invocations)
                .where(*self._fence(invocation_id, attempt))
                .values(heartbeat_at=0.0)
            )

    # -- the reaper's side ----------------------------------------------------------------

    async def stale_attempts(self, stale_after: float, limit: int = 100) -> list[StaleAttempt]:
        query = (
            sa.select(inv.id, inv.attempt, inv.cancel_requested)
            .where(inv.status == Status.ACTIVE.value, inv.heartbeat_at < self._now - stale_after)
            .order_by(inv.heartbeat_at)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [StaleAttempt(r.id, r.attempt, bool(r.cancel_requested)) for r in rows]

    async def requeue_for_recovery(
        self, invocation_id: str, attempt: int, stale_after: float, delay: float
    ) -> bool:
        """Put a dead attempt's invocation back in the queue for a replacement attempt."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                sa.update(invocations)
                .where(
                    *self._fence(invocation_id, attempt),
                    inv.heartbeat_at < self._now - stale_after,
                )
                .values(status=Status.QUEUED.value, worker=None, enqueued_at=self._now + delay)
            )
            return result.rowcount == 1

    async def take_unclaimed(self, older_than: float, limit: int = 500) -> list[str]:
        """Queued invocations nobody claimed for ``older_than`` s; marks them re-enqueued now."""
        overdue = sa.and_(
            inv.status == Status.QUEUED.value, inv.enqueued_at < self._now - older_than
        )
        async with self.engine.begin() as conn:
            ids = (
                await conn.execute(sa.select(inv.id).where(overdue).order_by(inv.seq).limit(limit))
            ).scalars().all()
            if not ids:
                return []
            rows = await conn.execute(
                sa.update(invocations)
                .where(overdue, inv.id.in_(ids))
                .values(enqueued_at=self._now)
                .returning(inv.id)
            )
            return list(rows.scalars().all())

    async def delete_expired(self, retention: float, limit: int = 500) -> int:
        """Delete up to ``limit`` terminal invocations finished before the retention period."""
        async with self.engine.begin() as conn:
            ids = (
                await conn.execute(
                    sa.select(inv.id)
                    .where(inv.status.in_(TERMINAL_VALUES), inv.finished_at < self._now - retention)
                    .limit(limit)
                )
            ).scalars().all()
            if not ids:
                return 0
            await conn.execute(sa.delete(events).where(events.c.invocation_id.in_(ids)))
            await conn.execute(sa.delete(invocations).where(inv.id.in_(ids)))
            return len(ids)
