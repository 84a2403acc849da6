"""``ctx.thread``: the conversation an invocation's session shares (agent memory, spec §4.10).

Invocations of one owner that share a ``session_id`` run one at a time, in acceptance order, so
each sees the turns of those before it. The turns live in the store (PostgreSQL or SQLite, never
only in memory), at most ``keep`` per thread, trimmed oldest-first. A handler should read the
history inside a durable step (``ctx.step``) so that every attempt of the invocation sees the
same history, and append its own turns once at the end (an append is idempotent per invocation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tether.store.threads import Threads

TurnRole = Literal["user", "assistant"]


@dataclass(frozen=True, slots=True)
class ThreadTurn:
    role: TurnRole
    content: str


class SessionThread:
    """The thread of ``(owner, session_id)``, as one invocation sees it."""

    def __init__(
        self, threads: Threads, owner: str, session_id: str, invocation_id: str, keep: int
    ) -> None:
        self._threads = threads
        self.owner = owner
        self.id = session_id
        self._invocation_id = invocation_id
        self.keep = keep

    async def history(self) -> list[ThreadTurn]:
        """The newest ``keep`` turns, oldest first (empty for a new thread)."""
        rows = await self._threads.recent(self.owner, self.id, self.keep)
        return [
            ThreadTurn("assistant" if r.role == "assistant" else "user", r.content) for r in rows
        ]

    async def append(self, turns: Sequence[ThreadTurn]) -> None:
        """Add this invocation's turns (again: nothing changes) and trim the thread."""
        pairs = [(t.role, t.content) for t in turns]
        await self._threads.append(self.owner, self.id, self._invocation_id, pairs, self.keep)

    async def delete(self) -> None:
        """Forget the whole thread (an ephemeral agent's, after its turn)."""
        await self._threads.delete(self.owner, self.id)
