"""Agent threads: the conversation the invocations of one session share (spec §4.10).

A thread is keyed by ``(owner, session_id)``: every query filters on the owner, so one owner can
never read, extend or delete another's thread, whatever id it names. Only user and assistant
messages are kept (tool messages are not: the reference's persistence). An append is idempotent
per ``(invocation_id, position)``, so an attempt that replays its end writes nothing twice, and
it trims the thread to its newest ``keep`` messages in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from tether.store.connection import Connection
from tether.store.engine import Database
from tether.store.schema import thread_messages, threads

msg = thread_messages.c
thr = threads.c


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

    async def ensure(self, owner: str, thread_id: str) -> None:
        """Create the thread if it does not exist yet (a new chat's, once its first turn is
        accepted; the turn's own append creates it as well)."""
        now = self._db.now
        insert = self._db.dialect.insert_new(threads, "owner", "id")
        async with self._db.transaction() as conn:
            await conn.execute(
                insert.values(owner=owner, id=thread_id, created_at=now, updated_at=now)
            )

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

    async def recent(self, owner: str, thread_id: str, limit: int) -> list[ThreadMessage]:
        """The newest ``limit`` messages of the thread, oldest first (none if it is unknown)."""
        async with self._db.connection() as conn:
            return await self._recent(conn, owner, thread_id, limit)

    async def _recent(
        self, conn: Connection, owner: str, thread_id: str, limit: int
    ) -> list[ThreadMessage]:
        newest = (
            sa.select(msg.seq, msg.role, msg.content, msg.created_at)
            .where(msg.owner == owner, msg.thread_id == thread_id)
            .order_by(msg.seq.desc())
            .limit(limit)
        )
        rows = (await conn.execute(newest)).all()
        return [ThreadMessage(r.role, r.content, r.created_at) for r in reversed(rows)]

    async def append(
        self,
        owner: str,
        thread_id: str,
        invocation_id: str,
        messages: Sequence[tuple[str, str]],
        keep: int,
    ) -> None:
        """Add one invocation's ``(role, content)`` messages (idempotent per invocation) and
        trim the thread to its newest ``keep`` messages."""
        now = self._db.now
        new_thread = self._db.dialect.insert_new(threads, "owner", "id")
        new_messages = self._db.dialect.insert_new(thread_messages, "invocation_id", "position")
        rows = [
            {
                "owner": owner,
                "thread_id": thread_id,
                "invocation_id": invocation_id,
                "position": position,
                "role": role,
                "content": content,
            }
            for position, (role, content) in enumerate(messages)
        ]
        async with self._db.transaction() as conn:
            await conn.execute(
                new_thread.values(owner=owner, id=thread_id, created_at=now, updated_at=now)
            )
            if rows:
                await conn.execute(new_messages.values(created_at=now), rows)
            await conn.execute(
                sa.update(threads)
                .where(thr.owner == owner, thr.id == thread_id)
                .values(updated_at=now)
            )
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

    async def delete(self, owner: str, thread_id: str) -> bool:
        """Delete the thread and its messages; False if the owner has no such thread."""
        async with self._db.transaction() as conn:
            await conn.execute(
                sa.delete(thread_messages).where(msg.owner == owner, msg.thread_id == thread_id)
            )
            gone = await conn.execute(
                sa.delete(threads).where(thr.owner == owner, thr.id == thread_id)
            )
            return bool(gone.rowcount)
