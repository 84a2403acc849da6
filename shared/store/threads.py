"""Agent threads: the conversation the invocations of one session share (spec §4.10).

A thread is keyed by ``(owner, session_id)``: every query filters on the owner, so one owner can
never read, extend or delete another's thread, whatever id it names. Only user and assistant
messages are kept (tool messages are not: the reference's persistence). An append is idempotent
per ``(invocation_id, position)``, so an attempt that replays its end writes nothing twice, and
it trims the thread to its newest ``keep`` messages in the same transaction.

A ``DELETE`` of a thread marks the invocations open in its session (queued, active or waiting)
as forgotten: they write nothing more to it, so a turn still queued does not start the thread
again when it runs, nor does a turn that was running (its answer, or its user message written
again by a replacement attempt). An append that may not create the thread (a turn's answer)
writes nothing once the thread is gone, whoever deleted it. Both take the thread's row first, and
an append reads the mark after it has the row: on PostgreSQL a delete and an append wait for
each other on that row lock, so neither can leave messages behind without their thread, and an
append that waited for a delete sees its mark.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from tether.store.connection import Connection
from tether.store.engine import Database
from tether.store.schema import (
    OPEN,
    forgotten_turns,
    invocations,
    status_is,
    thread_messages,
    threads,
)

msg = thread_messages.c
thr = threads.c
inv = invocations.c


class _Forgotten(Exception):
    """Rolls back a write of an invocation whose thread was deleted while it was open."""


@dataclass(frozen=True, slots=True)
class ThreadMessage:
    role: str
    content: str
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    id: str
    owner: str
    created_at: float
    updated_at: float
    messages: list[ThreadMessage]


class Threads:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def ensure(self, owner: str, thread_id: str, invocation_id: str) -> None:
        """Create the thread if it does not exist yet (a new chat's, once its first turn,
        ``invocation_id``, is accepted; the turn's own append creates it as well), unless a
        delete has forgotten that turn meanwhile."""
        with contextlib.suppress(_Forgotten):
            async with self._db.transaction() as conn:
                await self._create(conn, owner, thread_id)
                await self._unless_forgotten(conn, invocation_id)

    async def exists(self, owner: str, thread_id: str) -> bool:
        query = sa.select(thr.id).where(thr.owner == owner, thr.id == thread_id)
        async with self._db.connection() as conn:
            return (await conn.execute(query)).first() is not None

    async def get(self, owner: str, thread_id: str, limit: int) -> ThreadRecord | None:
        """The thread with its newest ``limit`` messages, oldest first; None if the owner has
        no such thread."""
        query = sa.select(thr.created_at, thr.updated_at).where(
            thr.owner == owner, thr.id == thread_id
        )
        async with self._db.connection() as conn:
            row = (await conn.execute(query)).first()
            if row is None:
                return None
            messages = await self._recent(conn, owner, thread_id, limit)
        return ThreadRecord(thread_id, owner, row.created_at, row.updated_at, messages)

    async def recent(
        self, owner: str, thread_id: str, limit: int, *, before: str | None = None
    ) -> list[ThreadMessage]:
        """The newest ``limit`` messages of the thread, oldest first (none if it is unknown);
        with ``before``, those of earlier invocations only (the history that invocation sees,
        whether or not it has written its own messages yet)."""
        async with self._db.connection() as conn:
            return await self._recent(conn, owner, thread_id, limit, before)

    async def _recent(
        self, conn: Connection, owner: str, thread_id: str, limit: int, before: str | None = None
    ) -> list[ThreadMessage]:
        newest = (
            sa.select(msg.seq, msg.role, msg.content, msg.created_at)
            .where(msg.owner == owner, msg.thread_id == thread_id)
            .order_by(msg.seq.desc())
            .limit(limit)
        )
        if before is not None:
            newest = newest.where(msg.invocation_id != before)
        rows = (await conn.execute(newest)).all()
        return [ThreadMessage(r.role, r.content, r.created_at) for r in reversed(rows)]

    async def append(
        self,
        owner: str,
        thread_id: str,
        invocation_id: str,
        messages: Sequence[tuple[str, str]],
        keep: int,
        *,
        start: int = 0,
        create: bool = True,
    ) -> bool:
        """Add one invocation's ``(role, content)`` messages at its positions ``start``, … (again:
        nothing changes) and trim the thread to its newest ``keep`` messages. With ``create``
        False a missing thread stays missing and nothing is written: returns False. So it does
        for an invocation a delete forgot, whatever ``create`` says."""
        rows = [
            {
                "owner": owner,
                "thread_id": thread_id,
                "invocation_id": invocation_id,
                "position": position,
                "role": role,
                "content": content,
            }
            for position, (role, content) in enumerate(messages, start)
        ]
        try:
            async with self._db.transaction() as conn:
                return await self._append(conn, owner, thread_id, invocation_id, rows, keep, create)
        except _Forgotten:
            return False

    async def _append(
        self,
        conn: Connection,
        owner: str,
        thread_id: str,
        invocation_id: str,
        rows: list[dict[str, object]],
        keep: int,
        create: bool,
    ) -> bool:
        now = self._db.now
        if create:
            await self._create(conn, owner, thread_id)
        touched = await conn.execute(
            sa.update(threads).where(thr.owner == owner, thr.id == thread_id).values(updated_at=now)
        )
        if not touched.rowcount:
            return False
        await self._unless_forgotten(conn, invocation_id)  # read once the thread's row is held
        if rows:
            new_messages = self._db.dialect.insert_new(thread_messages, "invocation_id", "position")
            await conn.execute(new_messages.values(created_at=now), rows)
        kept = (
            sa.select(msg.seq)
            .where(msg.owner == owner, msg.thread_id == thread_id)
            .order_by(msg.seq.desc())
            .limit(keep)
            .subquery()
        )
        oldest_kept = sa.select(sa.func.min(kept.c.seq))
        await conn.execute(
            sa.delete(thread_messages).where(
                msg.owner == owner,
                msg.thread_id == thread_id,
                msg.seq < oldest_kept.scalar_subquery(),
            )
        )
        return True

    async def _create(self, conn: Connection, owner: str, thread_id: str) -> None:
        now = self._db.now
        new_thread = self._db.dialect.insert_new(threads, "owner", "id")
        await conn.execute(
            new_thread.values(owner=owner, id=thread_id, created_at=now, updated_at=now)
        )

    async def _unless_forgotten(self, conn: Connection, invocation_id: str) -> None:
        """Raise :class:`_Forgotten` (to roll the write back) if a delete forgot the invocation."""
        marked = sa.select(forgotten_turns.c.invocation_id).where(
            forgotten_turns.c.invocation_id == invocation_id
        )
        if (await conn.execute(marked)).first() is not None:
            raise _Forgotten

    async def delete(self, owner: str, thread_id: str, *, forget_open: bool = True) -> bool:
        """Delete the thread and its messages; False if the owner has no such thread. With
        ``forget_open`` (a user's ``DELETE``) the invocations open in its session are forgotten:
        they write to it no more. Without (a run deleting its own thread), a later append starts
        the thread again."""
        async with self._db.transaction() as conn:
            gone = await conn.execute(
                sa.delete(threads).where(thr.owner == owner, thr.id == thread_id)
            )
            if gone.rowcount and forget_open:
                open_turns = sa.select(inv.id).where(
                    inv.owner == owner, inv.session_id == thread_id, status_is(inv.status, *OPEN)
                )
                forget = self._db.dialect.insert_new(forgotten_turns, "invocation_id")
                await conn.execute(forget.from_select(["invocation_id"], open_turns))
            await conn.execute(
                sa.delete(thread_messages).where(msg.owner == owner, msg.thread_id == thread_id)
            )
            return bool(gone.rowcount)
