"""Every body the gateway reads or writes, as pydantic models.

Requests are validated with these models, every JSON answer is built from them
(:mod:`tether.gateway.responses`), and ``/openapi.json`` is generated from them
(:mod:`tether.gateway.openapi`): the document cannot drift from the wire.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    StrictBool,
    StrictInt,
    StrictStr,
)

from tether.errors import MESSAGES, ErrorCode
from tether.jsonvalue import check_text
from tether.outcomes import iso_utc
from tether.store.schema import Invocation, Status

MAX_CURSOR = 2**63 - 1
"""Cursors and list positions are PostgreSQL ``bigint``s."""
MAX_PAGE = 200
MIN_PRIORITY, MAX_PRIORITY = -10, 10
_ASCII_INTEGER = re.compile(r"[0-9]{1,20}")


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def canonical_uuid(value: str) -> str:
    """Any UUID spelling → lower-case hyphenated; ValueError otherwise."""
    if _CANONICAL_UUID.fullmatch(value):  # already so, as clients send them: 0.3 us, not 2.3
        return value
    try:
        return str(uuid.UUID(value))
    except ValueError as exc:
        raise ValueError("id must be a UUID") from exc


def ascii_integer(value: object) -> object:
    """A query string or header as an integer: ASCII digits only (``str.isdigit`` and ``int``
    also take ``²``, ``①`` or ``٣``)."""
    if isinstance(value, str):
        if not _ASCII_INTEGER.fullmatch(value):
            raise ValueError("must be a non-negative integer")
        return int(value)
    return value


def storable_text(value: str) -> str:
    """Text a column can hold (no NUL, no lone surrogate); InvalidJson is a ValueError."""
    check_text(value)
    return value


Uuid = Annotated[str, Field(json_schema_extra={"format": "uuid"})]
Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
# constraints before the validator, or pydantic checks them but documents them as unknown keys
Cursor = Annotated[
    int,
    Field(ge=0, le=MAX_CURSOR, description="An event cursor: events after it are sent."),
    BeforeValidator(ascii_integer),
]
SessionId = Annotated[
    StrictStr,
    Field(
        min_length=1,
        max_length=256,
        json_schema_extra={"pattern": "^[^\\u0000]*$"},
        description="Invocations sharing it (per owner) run one at a time, in acceptance order.",
    ),
    AfterValidator(storable_text),
]
STRICT = ConfigDict(extra="forbid")


class InvocationRequest(BaseModel):
    """``POST /api/invocations``: unknown keys are rejected."""

    model_config = STRICT

    id: Annotated[StrictStr, AfterValidator(canonical_uuid)] = Field(
        json_schema_extra={"format": "uuid"},
        description="Client-generated UUID, the idempotency key; any spelling, echoed canonical.",
    )
    input: Any = Field(
        default_factory=list, description="Any JSON value (null included), handed to the handler."
    )
    session_id: SessionId | None = None
    stream: StrictBool = Field(False, description="Answer with an SSE stream of the events.")
    background: StrictBool = Field(False, description="Answer 202 at once (wins over stream).")
    priority: StrictInt = Field(
        0,
        ge=MIN_PRIORITY,
        le=MAX_PRIORITY,
        description=(
            "Higher runs first among its tenant's queued invocations (within the tenant's fair "
            "share: it never takes another tenant's turn); part of the request, so the same id "
            "with another priority is a conflict."
        ),
    )


class InputRequest(BaseModel):
    """``POST /api/invocations/{id}/input``: resolve what a parked invocation waits for."""

    model_config = STRICT

    wait: StrictStr = Field(min_length=1, max_length=128, description="The wait's name.")
    value: Any = Field(description='Any JSON value; for an approval, {"decision": ...}.')


class ListQuery(BaseModel):
    """The query of ``GET /api/invocations``."""

    status: Status | None = Field(None, description="Only invocations in this status.")
    session_id: SessionId | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE), BeforeValidator(ascii_integer)] = 50
    cursor: Annotated[int, Field(ge=0, le=MAX_CURSOR), BeforeValidator(ascii_integer)] | None = (
        Field(None, description="``next_cursor`` of the previous page.")
    )


# -- answers --------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    model_config = STRICT

    code: ErrorCode
    message: str


class ErrorResponse(BaseModel):
    """The one error shape; ``detail`` repeats the message for AgentKit clients."""

    model_config = STRICT

    error: ErrorDetail
    detail: str

    @classmethod
    def of(cls, code: ErrorCode, message: str | None = None) -> ErrorResponse:
        text = message or MESSAGES[code]
        return cls(error=ErrorDetail(code=code, message=text), detail=text)


class InvocationErrorResponse(ErrorResponse):
    """A sync caller's answer for a run that ended without output: 500 when it failed, 409 when
    it was cancelled (whoever cancelled it, whatever state it was in)."""

    id: Uuid
    status: Literal[Status.FAILED, Status.CANCELLED]


class CancelledDetail(ErrorDetail):
    code: Literal[ErrorCode.CANCELLED]


class UsageView(BaseModel):
    """What the invocation's model calls used, over all its attempts."""

    model_config = STRICT

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    total_tokens: int = Field(ge=0)
    cost: float = Field(ge=0, description="From the agents' model prices; 0 when none is known.")
    estimated: bool = Field(
        description="Some call's model reported no usage: its tokens were estimated from the text."
    )
    model_calls: int = Field(ge=1)


class _StatusDocument(BaseModel):
    """What every status document holds; ``status`` decides what else it has."""

    model_config = STRICT

    id: Uuid
    status: Status
    session_id: str | None
    attempt: int = Field(ge=0, description="1-based; 0 until the first attempt starts.")
    created_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None
    last_event_id: int = Field(ge=0, description="The cursor of the last stored event.")
    usage: UsageView | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="Present once the run has made a model call.",
    )
    tenant: str = Field(description="Whose limits and share it counts against.")
    priority: int = Field(ge=MIN_PRIORITY, le=MAX_PRIORITY, description="As requested.")


class OpenView(_StatusDocument):
    status: Literal[Status.QUEUED, Status.ACTIVE]


class WaitEntry(BaseModel):
    """One wait of a parked invocation; an approval adds ``approval_id``, ``tool_name``, ``args``
    and ``annotations``, an input wait its ``prompt``."""

    model_config = ConfigDict(extra="allow")

    wait: str
    kind: Literal["input", "sleep"]
    expires_at: Timestamp | None


class WaitingView(_StatusDocument):
    """Parked: holds no worker until what it waits for is resolved."""

    status: Literal[Status.WAITING]
    waiting_for: list[WaitEntry]


class CompletedView(_StatusDocument):
    status: Literal[Status.COMPLETED]
    output: Any = Field(description="What the handler returned (any JSON value).")


class FailedView(_StatusDocument):
    status: Literal[Status.FAILED]
    error: ErrorDetail


class CancelledView(_StatusDocument):
    """One document for every cancelled invocation, queued or running when it was cancelled."""

    status: Literal[Status.CANCELLED]
    error: CancelledDetail


class InvocationView(
    RootModel[
        Annotated[
            OpenView | WaitingView | CompletedView | FailedView | CancelledView,
            Field(discriminator="status"),
        ]
    ]
):
    """``GET /api/invocations/{id}``: AgentKit's ``id``, ``status``, ``output`` (completed) and
    ``error`` (failed, cancelled), plus Tether's extensions."""


class CompletedResponse(BaseModel):
    """A sync caller's answer for a completed run (200)."""

    model_config = STRICT

    id: Uuid
    status: Literal[Status.COMPLETED]
    output: Any = Field(description="What the handler returned (any JSON value).")


class ParkedResponse(WaitingView):
    """A sync caller's 202 for a run that parked: what it waits for, and where to follow it."""

    status_url: str
    events_url: str

    @classmethod
    def of(cls, parked: WaitingView) -> ParkedResponse:
        where = status_url(parked.id)
        fields = {**parked.model_dump(), "status_url": where, "events_url": f"{where}/events"}
        return cls.model_validate(fields)


class AcceptedResponse(BaseModel):
    """202: background mode, or a sync caller still waiting after ``sync_timeout``."""

    model_config = STRICT

    id: Uuid
    status: Status
    status_url: str
    events_url: str

    @classmethod
    def of(cls, invocation: Invocation) -> AcceptedResponse:
        where = status_url(invocation.id)
        return cls(
            id=invocation.id,
            status=invocation.status,
            status_url=where,
            events_url=f"{where}/events",
        )


def status_url(invocation_id: str) -> str:
    return f"/api/invocations/{invocation_id}"


class InvocationPage(BaseModel):
    model_config = STRICT

    data: list[InvocationView]
    next_cursor: int | None = Field(
        description="Pass as ``cursor`` for the next page; null at the end."
    )


class HealthResponse(BaseModel):
    model_config = STRICT

    status: Literal["ok"]


class ReadyChecks(BaseModel):
    model_config = STRICT

    database: Literal["ok", "unavailable", "not_migrated"]
    """``not_migrated``: reachable, but without this release's migrations (``tether migrate``)."""
    broker: Literal["ok", "unavailable"]
    """The queue's Redis (``redis_url``); ``tether dev``'s own loop is always ok."""
    pubsub: Literal["ok", "unavailable"]
    """Pub/sub's Redis (``pubsub_redis_url``, else ``redis_url``)."""


class ReadyResponse(BaseModel):
    """``/readyz``: 200 when all are reachable, 503 otherwise (with this same body)."""

    model_config = STRICT

    status: Literal["ready", "unavailable"]
    checks: ReadyChecks


# -- from rows ------------------------------------------------------------------------------


def error_of(invocation: Invocation) -> ErrorDetail:
    """The error a failed or cancelled invocation reports: its stored code and fixed message."""
    if invocation.status is Status.CANCELLED:
        return CancelledDetail(code=ErrorCode.CANCELLED, message=MESSAGES[ErrorCode.CANCELLED])
    try:
        code = ErrorCode(invocation.error_code or ErrorCode.INVOCATION_FAILED)
    except ValueError:  # a code this version does not know
        code = ErrorCode.INVOCATION_FAILED
    return ErrorDetail(code=code, message=invocation.error_message or MESSAGES[code])


def view(invocation: Invocation, waiting_for: list[dict[str, Any]] | None = None) -> InvocationView:
    """The status document of an invocation (``waiting_for``: the waits of a parked one)."""
    fields: dict[str, Any] = {
        "id": invocation.id,
        "status": invocation.status,
        "session_id": invocation.session_id,
        "attempt": invocation.attempt,
        "created_at": iso_utc(invocation.created_at),
        "started_at": iso_utc(invocation.started_at),
        "finished_at": iso_utc(invocation.finished_at),
        "last_event_id": invocation.last_event_id,
        "tenant": invocation.tenant,
        "priority": invocation.priority,
    }
    if invocation.usage is not None:
        fields["usage"] = invocation.usage.to_json()
    if invocation.status is Status.WAITING:
        fields["waiting_for"] = waiting_for or []
    elif invocation.status is Status.COMPLETED:
        fields["output"] = invocation.output
    elif invocation.status.is_terminal:
        fields["error"] = error_of(invocation)
    return InvocationView.model_validate(fields)
