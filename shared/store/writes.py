"""What callers hand the store to write, and what they get back: typed, never bare tuples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.events import Event
from tether.jsonvalue import JsonText
from tether.outcomes import Outcome
from tether.store.schema import Invocation


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append: the store gives it the next cursor of its invocation's log."""

    type: str
    data: Any
    text: JsonText | None = field(default=None, compare=False, repr=False)
    """``data`` encoded already (:attr:`tether.events.Event.text`)."""


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Events an attempt appends under its fence."""

    invocation_id: str
    attempt: int
    events: Sequence[NewEvent]


@dataclass(frozen=True, slots=True)
class FinishRequest:
    """An attempt's end under its fence: the outcome, after the events it still buffered.

    ``stale_after`` (the reaper's): only if the attempt has not beaten for that many seconds.
    """

    invocation_id: str
    attempt: int
    outcome: Outcome
    pending: Sequence[NewEvent] = ()
    stale_after: float | None = None


@dataclass(frozen=True, slots=True)
class Accepted:
    invocation: Invocation
    created: bool


@dataclass(frozen=True, slots=True)
class Finished:
    """A terminal transition: the events it appended and who may run next in the session."""

    events: list[Event]
    successor_id: str | None
