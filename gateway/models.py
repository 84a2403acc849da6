"""Request and response bodies; the OpenAPI document is generated from these same models."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator

from tether.outcomes import iso_utc
from tether.store.schema import Invocation, Status


class InvocationRequest(BaseModel):
    """``POST /api/invocations``: unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid")

    id: StrictStr = Field(description="Client-generated UUID, the idempotency key.")
    input: Any = Field(default_factory=list, description="Any JSON value, handed to the handler.")
    session_id: StrictStr | None = Field(
        None, min_length=1, max_length=256, description="Invocations sharing it run one at a time."
    )
    stream: StrictBool = Field(False, description="Answer with an SSE stream of the events.")
    background: StrictBool = Field(False, description="Answer 202 at once (wins over stream).")

    @field_validator("id")
    @classmethod
    def id_is_uuid(cls, value: str) -> str:
        return canonical_uuid(value)


def canonical_uuid(value: str) -> str:
    """Any UUID spelling → lower-case hyphenated; ValueError otherwise."""
    try:
        return str(uuid.UUID(value))
    except ValueError as exc:
        raise ValueError("id must be a UUID") from exc


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail
    detail: str


class InvocationView(BaseModel):
    """``GET /api/invocations/{id}``."""

    id: str
    status: Status
    output: Any = None
    error: ErrorDetail | None = None
    session_id: str | None = None
    attempt: int
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    last_event_id: int
    waiting_for: list[dict[str, Any]] | None = Field(
        None,
        description=(
            "Only when status is 'waiting': each wait as {wait, kind, prompt, expires_at, ...}; "
            "approvals add approval_id, tool_name, args and annotations."
        ),
    )


class AcceptedResponse(BaseModel):
    id: str
    status: Status
    status_url: str
    events_url: str


class InvocationPage(BaseModel):
    data: list[InvocationView]
    next_cursor: str | None


_iso = iso_utc


def view(invocation: Invocation, waiting_for: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The status document: AgentKit's fields plus Tether's extensions (``waiting_for`` lists
    the waits of a ``waiting`` invocation)."""
    body: dict[str, Any] = {"id": invocation.id, "status": invocation.status.value}
    if invocation.status is Status.WAITING:
        body["waiting_for"] = waiting_for or []
    if invocation.status is Status.COMPLETED:
        body["output"] = invocation.output
    elif invocation.error_code is not None and invocation.status.is_terminal:
        body["error"] = {"code": invocation.error_code, "message": invocation.error_message}
    body.update(
        session_id=invocation.session_id,
        attempt=invocation.attempt,
        created_at=_iso(invocation.created_at),
        started_at=_iso(invocation.started_at),
        finished_at=_iso(invocation.finished_at),
        last_event_id=invocation.last_event_id,
    )
    return body


def urls(invocation_id: str) -> dict[str, str]:
    status_url = f"/api/invocations/{invocation_id}"
    return {"status_url": status_url, "events_url": f"{status_url}/events"}
