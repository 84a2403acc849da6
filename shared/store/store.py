"""The one seam to the database: every query Tether runs, on PostgreSQL or the embedded SQLite.

Every write an attempt makes is fenced: it only lands while the row is still ``active`` under
that attempt number. A superseded attempt gets :class:`Superseded` and must stop.
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether.events import RUN_RESUMED, RUN_STARTED, Event
from tether.outcomes import Outcome, cancelled, started_data
from tether.store.engine import create_engine
from tether.store.journal import RESUME, Journal
from tether.store.migrate import migrate
from tether.store.schema import (
    INVOCATION_COLUMNS,
    OPEN,
    TERMINAL,
    Claim,
    Invocation,
    Json,
    NewInvocation,
    StaleAttempt,
    Status,
    events,
    invocations,
    steps,
    waits,
)

inv = invocations.c
TERMINAL_VALUES = tuple(s.value for s in TERMINAL)
CANCEL_ROUNDS = 3
R = TypeVar("R")


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

        self.journal = Journal(engine, self._now, self.dialect)

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
                Path(f"{self._temporary_file}{suffix}").unlink(missing_ok=True)  # noqa: ASYNC240

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
                if (
                    max_open_per_owner
                    and await self._open_count(conn, new.owner, max_open_per_owner + 1)
                    > max_open_per_owner
                ):
                    await conn.rollback()
                    raise OwnerLimitReached(new.owner)
                return Accepted(Invocation.from_row(row), created=True)
            existing = await self._get(conn, new.id)
        if existing is None:  # deleted by retention between the two statements
            return await self.accept(new, max_open_per_owner=max_open_per_owner)
        if existing.owner != new.owner or existing.request_hash != new.request_hash:
            raise Conflict(new.id)
        return Accepted(existing, created=False)

    async def accept_many(
        self, batch: Sequence[NewInvocation], *, max_open_per_owner: int = 0
    ) -> list[Accepted | Conflict | OwnerLimitReached]:
        """``accept`` for many requests with distinct ids in one transaction (group commit).

        One result per request, in order: what ``accept`` would return, or the exception it
        would raise, for the caller to raise for that request alone.
        """
        insert = (
            self._insert()
            .values(created_at=self._now, enqueued_at=self._now)
            .on_conflict_do_nothing(index_elements=["id"])
            .returning(inv.id, inv.seq, inv.created_at)  # the rest is the request's own
        )
        news = {new.id: new for new in batch}
        async with self.engine.begin() as conn:  # executemany: one multi-row INSERT, cached
            inserted = await conn.execute(insert, [self._new_row(new) for new in batch])
            created = {r.id: self._queued(news[r.id], r.seq, r.created_at) for r in inserted}
            refused = await self._over_owner_limit(
                conn, [new for new in batch if new.id in created], max_open_per_owner
            )
            if refused:  # as if rolled back: nobody ever saw these rows
                await conn.execute(sa.delete(invocations).where(inv.id.in_(list(refused))))
            others = [new.id for new in batch if new.id not in created]
            existing: dict[str, Invocation] = {}
            if others:
                rows = await conn.execute(sa.select(*INVOCATION_COLUMNS).where(inv.id.in_(others)))
                existing = {row["id"]: Invocation.from_row(row) for row in rows.mappings()}
        results: list[Accepted | Conflict | OwnerLimitReached] = []
        for new in batch:
            found = existing.get(new.id)
            if new.id in refused:
                results.append(OwnerLimitReached(new.owner))
            elif new.id in created:
                results.append(Accepted(created[new.id], created=True))
            elif found is None:  # deleted by retention between the two statements
                try:
                    results.append(await self.accept(new, max_open_per_owner=max_open_per_owner))
                except (Conflict, OwnerLimitReached) as exc:
                    results.append(exc)
            elif found.owner != new.owner or found.request_hash != new.request_hash:
                results.append(Conflict(new.id))
            else:
                results.append(Accepted(found, created=False))
        return results

    @staticmethod
    def _queued(new: NewInvocation, seq: int, created_at: float) -> Invocation:
        """A just-inserted invocation, as a read of its row would return it."""
        return Invocation(
            id=new.id,
            seq=seq,
            owner=new.owner,
            session_id=new.session_id,
            input=new.input,
            request_hash=new.request_hash,
            status=Status.QUEUED,
            attempt=0,
            cancel_requested=False,
            output=None,
            error_code=None,
            error_message=None,
            last_event_id=0,
            created_at=created_at,
            started_at=None,
            finished_at=None,
        )

    def _new_row(self, new: NewInvocation) -> dict[str, Any]:
        return {
            "id": new.id,
            "owner": new.owner,
            "session_id": new.session_id,
            "input": new.input,
            "request_hash": new.request_hash,
            "status": Status.QUEUED.value,
            "attempt": 0,
            "cancel_requested": False,
            "last_event_id": 0,
        }

    async def _over_owner_limit(
        self, conn: AsyncConnection, created: Sequence[NewInvocation], cap: int
    ) -> set[str]:
        """Ids of just-inserted rows that put their owner over ``cap`` open invocations (the
        latest of the batch first). Every accept enforces the cap, so each count stays near it."""
        if not cap or not created:
            return set()
        counts = await conn.execute(
            sa.select(inv.owner, sa.func.count())
            .where(inv.owner.in_(sorted({new.owner for new in created})), inv.status.in_(OPEN))
            .group_by(inv.owner)
        )
        refused: set[str] = set()
        for owner, open_count in counts.all():
            excess = int(open_count) - cap
            if excess > 0:
                refused.update([new.id for new in created if new.owner == owner][-excess:])
        return refused

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
        """Cancel a queued or waiting invocation at once, or flag an active one for its worker.

        Returns the terminal transition when it was cancelled here. Each statement sees what
        was committed when it began: an attempt that parks between the two (the first saw it
        ``active``, the flag then finds it ``waiting``) is looked at again, so the cancel
        cannot fall between them.
        """
        async with self.engine.begin() as conn:
            for _ in range(CANCEL_ROUNDS):
                finished = await self._finish(
                    conn,
                    sa.and_(
                        inv.id == invocation_id,
                        inv.status.in_([Status.QUEUED.value, Status.WAITING.value]),
                    ),
                    cancelled(),
                )
                if finished is not None:
                    return finished
                flagged = await conn.execute(
                    sa.update(invocations)
                    .where(inv.id == invocation_id, inv.status == Status.ACTIVE.value)
                    .values(cancel_requested=True)
                )
                if flagged.rowcount:
                    return None
                status = await conn.scalar(sa.select(inv.status).where(inv.id == invocation_id))
                if status is None or status in TERMINAL_VALUES:
                    return None
        return None

    # -- the worker's side ----------------------------------------------------------------

    async def claim(self, invocation_id: str, worker: str) -> Claim | None:
        """Start the next attempt if the invocation is queued and heads its session."""
        return (await self.claim_many([invocation_id], worker)).get(invocation_id)

    async def claim_many(self, invocation_ids: Sequence[str], worker: str) -> dict[str, Claim]:
        """``claim`` for many invocations in one transaction; the claims won, by id."""
        try:
            return await self._claim_many(invocation_ids, worker)
        except sa.exc.IntegrityError:  # a racing claim took a session's one active slot
            if len(invocation_ids) == 1:
                return {}
        won: dict[str, Claim] = {}
        for invocation_id in invocation_ids:  # one by one, so only the loser loses
            won.update(await self.claim_many([invocation_id], worker))
        return won

    async def _claim_many(self, invocation_ids: Sequence[str], worker: str) -> dict[str, Claim]:
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
                inv.id.in_(list(invocation_ids)),
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
            .returning(
                inv.id,
                inv.attempt,
                inv.input,
                inv.session_id,
                inv.checkpoint,
                inv.last_event_id,
                inv.resumed_by,
            )
        )
        async with self.engine.begin() as conn:
            rows = (await conn.execute(claim)).all()
            if rows:
                await conn.execute(
                    events.insert().values(created_at=self._now),
                    [
                        {
                            "invocation_id": r.id,
                            "cursor": r.last_event_id,
                            "type": RUN_RESUMED if r.resumed_by == RESUME else RUN_STARTED,
                            "data": started_data(r.attempt, resumed=r.resumed_by == RESUME),
                        }
                        for r in rows
                    ],
                )
        return {
            r.id: Claim(
                r.id,
                r.attempt,
                r.input,
                r.session_id,
                r.checkpoint,
                r.last_event_id,
                r.resumed_by,
            )
            for r in rows
        }

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

    async def append_events_many(
        self, batch: Sequence[tuple[str, int, Sequence[tuple[str, Any]]]]
    ) -> list[list[Event] | Superseded]:
        """``append_events`` for many attempts, ``(invocation id, attempt, events)`` each, in one
        transaction (group commit); one result per attempt, in order.

        The transaction locks only the rows that are free (``SKIP LOCKED``), so it never waits
        for a lock while holding others and cannot deadlock with a heartbeat updating the same
        rows in another order; the few that were held are written once they are free.
        """
        if self.dialect != "postgresql" or len(batch) == 1:
            return await self._one_by_one(self.append_events, batch, [None] * len(batch))
        return await self._grouped(self._append_many, self.append_events, batch)

    async def _one_by_one(
        self,
        write: Callable[..., Awaitable[R]],
        batch: Sequence[tuple[Any, ...]],
        results: list[R | Superseded | None],
    ) -> list[R | Superseded]:
        """``write(*item)`` for every item whose result is still None."""
        done: list[R | Superseded] = []
        for item, result in zip(batch, results, strict=True):
            if result is None:
                try:
                    result = await write(*item)
                except Superseded as exc:
                    result = exc
            done.append(result)
        return done

    async def _grouped(
        self,
        grouped: Callable[[Sequence[Any]], Awaitable[list[R | Superseded | None]]],
        write: Callable[..., Awaitable[R]],
        batch: Sequence[tuple[Any, ...]],
    ) -> list[R | Superseded]:
        """``grouped`` (None for the items whose row another transaction held) until every item
        is written: it waits for the first held row alone with ``write``, holding no other lock,
        then groups the rest again (usually free by then: a heartbeat holds them all at once)."""
        results: list[R | Superseded | None] = [None] * len(batch)
        todo = list(range(len(batch)))
        while todo:
            for i, result in zip(todo, await grouped([batch[i] for i in todo]), strict=True):
                results[i] = result
            held = [i for i in todo if results[i] is None]
            if held:
                alone: list[R | Superseded | None] = [None]
                results[held[0]] = (await self._one_by_one(write, [batch[held[0]]], alone))[0]
            todo = held[1:]
        return await self._one_by_one(write, batch, results)  # (every result is set by now)

    async def _lock_free(self, conn: AsyncConnection, invocation_ids: Sequence[str]) -> set[str]:
        """Lock the rows nobody holds, without waiting (PostgreSQL); the ids locked."""
        rows = await conn.execute(
            sa.select(inv.id)
            .where(inv.id.in_(list(invocation_ids)))
            .with_for_update(skip_locked=True)
        )
        return {row.id for row in rows}

    async def _append_many(
        self, batch: Sequence[tuple[str, int, Sequence[tuple[str, Any]]]]
    ) -> list[list[Event] | Superseded | None]:
        """The grouped write of the PostgreSQL path; None for the items whose row was held."""
        results: list[list[Event] | Superseded | None] = [None] * len(batch)
        rows: list[dict[str, Any]] = []
        async with self.engine.begin() as conn:
            free = await self._lock_free(conn, [invocation_id for invocation_id, *_ in batch])
            mine = [item for item in batch if item[0] in free]
            if not mine:
                return results
            counts = sa.values(
                sa.column("id", sa.Text),
                sa.column("attempt", sa.Integer),
                sa.column("events", sa.Integer),
                name="counts",
            ).data([(i, a, len(events_of)) for i, a, events_of in mine])
            advance = (
                sa.update(invocations)
                .where(
                    inv.id == counts.c.id,
                    inv.attempt == counts.c.attempt,
                    inv.status == Status.ACTIVE.value,
                )
                .values(last_event_id=inv.last_event_id + counts.c.events)
                .returning(inv.id, inv.last_event_id)
            )
            last = {row.id: row.last_event_id for row in await conn.execute(advance)}
            for n, (invocation_id, _, events_of) in enumerate(batch):
                if invocation_id not in free:
                    continue
                end = last.pop(invocation_id, None)  # popped: a repeated id is superseded
                if end is None:
                    results[n] = Superseded(invocation_id)
                    continue
                first = end - len(events_of) + 1
                stored = [Event(first + i, t, d) for i, (t, d) in enumerate(events_of)]
                rows += [self._event_row(invocation_id, e) for e in stored]
                results[n] = stored
            if rows:
                await conn.execute(events.insert().values(created_at=self._now), rows)
        return results

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

    async def finish_many(
        self, batch: Sequence[tuple[str, int, Outcome, Sequence[tuple[str, Any]]]]
    ) -> list[Finished | Superseded]:
        """``finish`` for many attempts, ``(invocation id, attempt, outcome, pending)`` each, in
        one transaction (group commit); one result per attempt, in order. Rows another
        transaction holds are finished once free, as in ``append_events_many``."""
        if self.dialect != "postgresql":  # one writer at a time anyway: one transaction, no locks
            results: list[Finished | Superseded] = []
            async with self.engine.begin() as conn:
                for invocation_id, attempt, outcome, pending in batch:
                    condition = sa.and_(*self._fence(invocation_id, attempt))
                    finished = await self._finish(conn, condition, outcome, pending)
                    results.append(Superseded(invocation_id) if finished is None else finished)
            return results
        if len(batch) == 1:
            return await self._one_by_one(self.finish, batch, [None])
        return await self._grouped(self._finish_many, self.finish, batch)

    async def _finish_many(
        self, batch: Sequence[tuple[str, int, Outcome, Sequence[tuple[str, Any]]]]
    ) -> list[Finished | Superseded | None]:
        """The grouped write of the PostgreSQL path; None for the items whose row was held."""
        results: list[Finished | Superseded | None] = [None] * len(batch)
        stored_rows: list[dict[str, Any]] = []
        async with self.engine.begin() as conn:
            free = await self._lock_free(conn, [invocation_id for invocation_id, *_ in batch])
            mine = [item for item in batch if item[0] in free]
            if not mine:
                return results
            ended = {row.id: row for row in await conn.execute(self._finish_all(mine))}
            for n, (invocation_id, _, outcome, pending) in enumerate(batch):
                if invocation_id not in free:
                    continue
                row = ended.pop(invocation_id, None)  # popped: a repeated id is superseded
                if row is None:
                    results[n] = Superseded(invocation_id)
                    continue
                events_of = [*pending, (outcome.event_type, outcome.event_data)]
                first = row.last_event_id - len(events_of) + 1
                stored = [Event(first + i, t, d) for i, (t, d) in enumerate(events_of)]
                stored_rows += [self._event_row(invocation_id, e) for e in stored]
                successor = await self._successor(conn, row.owner, row.session_id)
                results[n] = Finished(stored, successor)
            if stored_rows:
                await conn.execute(events.insert().values(created_at=self._now), stored_rows)
        return results

    @staticmethod
    def _event_row(invocation_id: str, event: Event) -> dict[str, Any]:
        return {
            "invocation_id": invocation_id,
            "cursor": event.cursor,
            "type": event.type,
            "data": event.data,
        }

    def _finish_all(
        self, batch: Sequence[tuple[str, int, Outcome, Sequence[tuple[str, Any]]]]
    ) -> Any:
        """One fenced UPDATE ending every attempt of the batch (PostgreSQL)."""
        ends = sa.values(
            sa.column("id", sa.Text),
            sa.column("attempt", sa.Integer),
            sa.column("status", sa.Text),
            sa.column("output", Json),
            sa.column("error_code", sa.Text),
            sa.column("error_message", sa.Text),
            sa.column("events", sa.Integer),
            name="ends",
        ).data(
            [
                (i, a, o.status.value, o.output, o.code, o.error_message, len(p) + 1)
                for i, a, o, p in batch
            ]
        )
        return (
            sa.update(invocations)
            .where(
                inv.id == ends.c.id,
                inv.attempt == ends.c.attempt,
                inv.status == Status.ACTIVE.value,
            )
            .values(
                status=ends.c.status,
                output=sa.cast(ends.c.output, Json),  # all-NULL VALUES columns come out as text
                error_code=ends.c.error_code,
                error_message=ends.c.error_message,
                finished_at=self._now,
                last_event_id=inv.last_event_id + ends.c.events,
            )
            .returning(inv.id, inv.owner, inv.session_id, inv.last_event_id)
        )

    async def _successor(
        self, conn: AsyncConnection, owner: str, session_id: str | None
    ) -> str | None:
        """The session's next queued invocation, which may run now that this one ended."""
        if session_id is None:
            return None
        successor = await conn.scalar(
            sa.select(inv.id)
            .where(
                inv.owner == owner,
                inv.session_id == session_id,
                inv.status == Status.QUEUED.value,
            )
            .order_by(inv.seq)
            .limit(1)
        )
        return None if successor is None else str(successor)

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
                    error_code=outcome.code,
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
        batch = [*pending, (outcome.event_type, outcome.event_data)]
        stored = [Event(first + i, t, d) for i, (t, d) in enumerate(batch)]
        await self._insert_events(conn, row.id, stored)
        return Finished(stored, await self._successor(conn, row.owner, row.session_id))

    def _fence(self, invocation_id: str, attempt: int) -> tuple[sa.ColumnElement[bool], ...]:
        return (inv.id == invocation_id, inv.attempt == attempt, inv.status == Status.ACTIVE.value)

    async def _insert_events(
        self, conn: AsyncConnection, invocation_id: str, batch: Sequence[Event]
    ) -> None:
        await conn.execute(
            events.insert().values(created_at=self._now),
            [
                {"invocation_id": invocation_id, "cursor": e.cursor, "type": e.type, "data": e.data}
                for e in batch
            ],
        )

    async def heartbeat(
        self, attempts: Sequence[tuple[str, int]], claiming: Sequence[str] = (), worker: str = ""
    ) -> dict[str, bool]:
        """Beat for every attempt this process runs; returns id → cancel flag for the live ones.

        ``claiming``: ids whose claim by ``worker`` is in flight. A claim can commit while the
        claimer's event loop is blocked, before the attempt is registered; beating it by worker
        name keeps it from looking dead meanwhile.
        """
        mine: list[sa.ColumnElement[bool]] = []
        if attempts:
            mine.append(sa.tuple_(inv.id, inv.attempt).in_(list(attempts)))
        if claiming and worker:
            mine.append(sa.and_(inv.id.in_(list(claiming)), inv.worker == worker))
        if not mine:
            return {}
        async with self.engine.begin() as conn:
            rows = await conn.execute(
                sa.update(invocations)
                .where(inv.status == Status.ACTIVE.value, sa.or_(*mine))
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
            sa.select(inv.id, inv.attempt, inv.cancel_requested, inv.crashes)
            .where(inv.status == Status.ACTIVE.value, inv.heartbeat_at < self._now - stale_after)
            .order_by(inv.heartbeat_at)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [StaleAttempt(r.id, r.attempt, bool(r.cancel_requested), r.crashes) for r in rows]

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
                .values(
                    status=Status.QUEUED.value,
                    worker=None,
                    enqueued_at=self._now + delay,
                    resumed_by="crash",
                    crashes=inv.crashes + 1,
                )
            )
            return result.rowcount == 1

    async def take_unclaimed(self, older_than: float, limit: int = 500) -> list[str]:
        """Queued invocations nobody claimed for ``older_than`` s; marks them re-enqueued now."""
        overdue = sa.and_(
            inv.status == Status.QUEUED.value, inv.enqueued_at < self._now - older_than
        )
        async with self.engine.begin() as conn:
            ids = (
                (
                    await conn.execute(
                        sa.select(inv.id).where(overdue).order_by(inv.seq).limit(limit)
                    )
                )
                .scalars()
                .all()
            )
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
                (
                    await conn.execute(
                        sa.select(inv.id)
                        .where(
                            inv.status.in_(TERMINAL_VALUES), inv.finished_at < self._now - retention
                        )
                        .limit(limit)
                    )
                )
                .scalars()
                .all()
            )
            if not ids:
                return 0
            for table in (events, steps, waits):
                await conn.execute(sa.delete(table).where(table.c.invocation_id.in_(ids)))
            await conn.execute(sa.delete(invocations).where(inv.id.in_(ids)))
            return len(ids)
