"""An invocation's lifecycle: its statuses, which of them are terminal, and which hold a session.

``queued → active → completed | failed | cancelled``, and ``active → waiting → queued`` for a run
parked on durable waits. The outcomes, the store and the API all read these from here.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    QUEUED = "queued"
    ACTIVE = "active"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})
TERMINAL_VALUES = tuple(sorted(s.value for s in TERMINAL))
OPEN = (Status.QUEUED.value, Status.ACTIVE.value, Status.WAITING.value)
"""Statuses that hold their session's turn and count towards the owner's open invocations."""

RESUME = "resume"
"""``resumed_by`` of an attempt that runs because a wait was resolved."""
CRASH = "crash"
"""``resumed_by`` of an attempt that replaces one whose worker died."""
