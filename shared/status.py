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
TERMINAL_VALUES = (Status.COMPLETED.value, Status.FAILED.value, Status.CANCELLED.value)
"""The terminal statuses in the order the partial indexes list them (as ``OPEN`` is): SQLite
uses a partial index for an ``IN`` list only when the query's list matches it term for term."""
OPEN = (Status.QUEUED.value, Status.ACTIVE.value, Status.WAITING.value)
"""Statuses that hold their session's turn and count towards the owner's open invocations."""

RESUME = "resume"
"""``resumed_by`` of an attempt that runs because a wait was resolved."""
CRASH = "crash"
"""``resumed_by`` of an attempt that replaces one whose worker died."""
