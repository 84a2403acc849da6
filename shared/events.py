"""Event types: the reserved ``run.`` family and the rule every user type must follow."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.jsonvalue import JsonText, dumps

EVENT_TYPE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
RESERVED_PREFIX = "run."

RUN_STARTED = "run.started"
RUN_COMPLETED = "run.completed"
RUN_FAILED = "run.failed"
RUN_CANCELLED = "run.cancelled"
RUN_WAITING = "run.waiting"
RUN_RESUMED = "run.resumed"
TERMINAL_EVENTS = frozenset({RUN_COMPLETED, RUN_FAILED, RUN_CANCELLED})


class InvalidEvent(ValueError):
    """An event a handler may not emit."""


@dataclass(frozen=True, slots=True)
class Event:
    """One stored event: its cursor in the invocation's log, its type and its JSON payload."""

    cursor: int
    type: str
    data: Any
    text: JsonText | None = field(default=None, compare=False, repr=False)
    """``data`` encoded already, where its writer had it so (a completed run's terminal event,
    whose output the attempt checked): published as it is, not encoded again. The event's row
    leaves that output to the invocation's row (:mod:`tether.store.eventlog`)."""

    @property
    def is_terminal(self) -> bool:
        return self.type in TERMINAL_EVENTS


def user_event_type(event: Mapping[str, Any]) -> str:
    """Validate a handler's event and return its type."""
    if not isinstance(event, Mapping):
        raise InvalidEvent("an event must be a JSON object with a 'type' key")
    event_type = event.get("type")
    if not isinstance(event_type, str) or not EVENT_TYPE.fullmatch(event_type):
        raise InvalidEvent("event 'type' must match ^[A-Za-z0-9_.:-]{1,64}$")
    if event_type.startswith(RESERVED_PREFIX):
        raise InvalidEvent("event types starting with 'run.' are reserved for the runtime")
    return event_type


def encode_batch(batch: list[Event]) -> str:
    """One pub/sub message for a batch of stored events (an event's ``text`` as it is)."""
    if all(e.text is None for e in batch):
        return dumps([[e.cursor, e.type, e.data] for e in batch])
    return "[" + ",".join(map(_event_text, batch)) + "]"


def _event_text(event: Event) -> str:
    data = dumps(event.data) if event.text is None else event.text
    return f"[{event.cursor},{dumps(event.type)},{data}]"


def decode_batch(message: str) -> list[Event]:
    import json

    return [Event(int(c), str(t), d) for c, t, d in json.loads(message)]
