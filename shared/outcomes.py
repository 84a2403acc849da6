"""The one owner of how a run starts and ends: the ``run.*`` event payloads and the terminal
outcomes they announce. Everybody who writes or reads one (worker, reaper, the gateway's cancel
and its sync wait) goes through here, so a cancelled invocation looks the same whoever ended it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tether.errors import MESSAGES, ErrorCode
from tether.events import (
    RUN_CANCELLED,
    RUN_COMPLETED,
    RUN_FAILED,
    RUN_RESUMED,
    RUN_STARTED,
    RUN_WAITING,
    Event,
)
from tether.jsonvalue import JsonText, object_text
from tether.status import Status


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an invocation ends: its terminal status, what it stores, and the event announcing it."""

    status: Status
    output: Any = None
    error_code: ErrorCode | None = None
    output_text: JsonText | None = field(default=None, compare=False)
    """``output`` encoded already (the attempt checked it so): the row's column binds it as it
    is, and the terminal event is published with it (:attr:`event_text`; its stored row takes
    the output from the invocation's), so both hold what the check encoded even if the handler
    changed the value after returning it (from a task it left running)."""

    @property
    def stored_output(self) -> Any:
        """What the invocation's ``output`` column is given: the text when there is one."""
        return self.output if self.output_text is None else self.output_text

    @property
    def code(self) -> str | None:
        """The error code as stored."""
        return None if self.error_code is None else self.error_code.value

    @property
    def error_message(self) -> str | None:
        return None if self.error_code is None else MESSAGES[self.error_code]

    @property
    def event_type(self) -> str:
        return {
            Status.COMPLETED: RUN_COMPLETED,
            Status.FAILED: RUN_FAILED,
            Status.CANCELLED: RUN_CANCELLED,
        }[self.status]

    @property
    def event_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": self.event_type}
        if self.status is Status.COMPLETED:
            data["output"] = self.output
        elif self.error_code is not None:
            data["error"] = {"code": self.error_code.value, "message": self.error_message}
        return data

    @property
    def event_text(self) -> JsonText | None:
        """:attr:`event_data` encoded, its output the checked :attr:`output_text`, where there is
        one: the terminal event is published with the text the row stores."""
        if self.output_text is None or self.status is not Status.COMPLETED:
            return None
        return object_text({"type": self.event_type, "output": self.output_text})


def completed(output: Any, text: JsonText | None = None) -> Outcome:
    """A completed run's outcome; ``text``: ``output`` encoded already (:func:`encoded`)."""
    return Outcome(Status.COMPLETED, output=output, output_text=text)


def failed(code: ErrorCode) -> Outcome:
    return Outcome(Status.FAILED, error_code=code)


def cancelled() -> Outcome:
    """Whoever cancels (the API while queued, the worker while running, the reaper after a
    crash), the invocation ends with code ``cancelled`` and the same event."""
    return Outcome(Status.CANCELLED, error_code=ErrorCode.CANCELLED)


def started_data(attempt: int, *, resumed: bool = False) -> dict[str, Any]:
    """The payload of the event that opens an attempt: ``run.started``, or ``run.resumed`` when
    the attempt runs because a wait was resolved."""
    return {"type": RUN_RESUMED if resumed else RUN_STARTED, "attempt": attempt}


def iso_utc(epoch: float | None) -> str | None:
    """A database-clock time as the API shows it: ISO 8601 in UTC with a ``Z``."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


RESERVED_WAIT_KEYS = frozenset({"wait", "kind", "expires_at"})


def wait_entry(
    name: str, kind: str, details: dict[str, Any], wake_at: float | None
) -> dict[str, Any]:
    """One entry of ``waiting_for`` (in the status document and in ``run.waiting``)."""
    extra = {k: v for k, v in details.items() if k not in RESERVED_WAIT_KEYS}
    return {"wait": name, "kind": kind, **extra, "expires_at": iso_utc(wake_at)}


def waiting_data(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The payload of ``run.waiting``: what the invocation parked on."""
    return {"type": RUN_WAITING, "waiting_for": entries}


def outcome_of(event: Event) -> Outcome | None:
    """The outcome a terminal event announces, or None for any other event."""
    data = event.data if isinstance(event.data, dict) else {}
    if event.type == RUN_COMPLETED:
        return completed(data.get("output"))
    if event.type == RUN_CANCELLED:
        return cancelled()
    if event.type == RUN_FAILED:
        error = data.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        if isinstance(code, str) and code in ErrorCode._value2member_map_:
            return failed(ErrorCode(code))
        return failed(ErrorCode.INVOCATION_FAILED)
    return None
