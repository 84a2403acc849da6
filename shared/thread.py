"""``ctx.thread``: the conversation an invocation's session shares (agent memory, spec §4.10).

Invocations of one owner that share a ``session_id`` run one at a time, in acceptance order, so
each sees the turns of those before it. The turns live in the store (PostgreSQL or SQLite, never
only in memory), at most ``keep`` per thread, trimmed oldest-first. A handler should read the
history inside a durable step (``ctx.step``) so that every attempt of the invocation sees the
same history, and append its own turns (an append is idempotent per invocation and position).
The agent runtime appends a turn's user messages as it starts and its answer as it ends.
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
        """The newest ``keep`` turns of the invocations before this one, oldest first (empty for
        a new thread), never this invocation's own. Read it before appending: an append trims
        the thread to ``keep``, which may drop the oldest of these."""
        rows = await self._threads.recent(
            self.owner, self.id, self.keep, before=self._invocation_id
        )
        return [
            ThreadTurn("assistant" if r.role == "assistant" else "user", r.content) for r in rows
        ]

    async def append(
        self, turns: Sequence[ThreadTurn], *, start: int = 0, create: bool = True
    ) -> bool:
        """Add this invocation's turns (again: nothing changes) and trim the thread.

        An invocation that appends more than once passes ``start``: how many turns it appended
        before (each turn is kept once per position). With ``create`` False a thread deleted
        meanwhile stays deleted and nothing is written (returns False): pass it for every append
        after the first. Once a user's ``DELETE`` of the thread has come after this invocation
        was accepted, no append of it writes (returns False), ``create`` or not."""
        pairs = [(t.role, t.content) for t in turns]
        return await self._threads.append(
            self.owner, self.id, self._invocation_id, pairs, self.keep, start=start, create=create
        )

    async def delete(self) -> None:
        """Forget the whole thread now (an ephemeral agent's, after its turn). Unlike a user's
        ``DELETE``, this leaves the session's invocations free to start it again, this one
        included."""
        await self._threads.delete(self.owner, self.id, forget_open=False)
