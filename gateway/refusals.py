"""The error answers ``/openapi.json`` describes: each once, in the one error shape, narrowed to
the codes it can carry, with the headers it must have (``Retry-After``, ``Allow``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tether.errors import ErrorCode
from tether.gateway.models import ErrorResponse, InvocationErrorResponse
from tether.jsonvalue import MAX_DEPTH

Json = dict[str, Any]
REF = "#/components/schemas/{model}"


def ref(model: type[BaseModel]) -> Json:
    return {"$ref": REF.format(model=model.__name__)}


def json_content(schema: Json) -> Json:
    return {"application/json": {"schema": schema}}


def answer(description: str, schema: Json, headers: Json | None = None) -> Json:
    body: Json = {"description": description, "content": json_content(schema)}
    return body if headers is None else {**body, "headers": headers}


def error_schema(*codes: ErrorCode) -> Json:
    """The error shape, narrowed to the codes an answer can carry."""
    if not codes:
        return ref(ErrorResponse)
    return {"allOf": [ref(ErrorResponse), _with_code({"enum": [code.value for code in codes]})]}


def ended_schema(status: str, code: Json) -> Json:
    """A sync caller's answer for a run that ended without output, narrowed to one status."""
    narrowed = {"properties": {"status": {"const": status}, **_with_code(code)["properties"]}}
    return {"allOf": [ref(InvocationErrorResponse), narrowed]}


def _with_code(code: Json) -> Json:
    return {"properties": {"error": {"properties": {"code": code}}}}


def _header(description: str, schema: Json) -> Json:
    return {"description": description, "required": True, "schema": schema}


RETRY_AFTER = {"Retry-After": _header("Seconds to wait", {"type": "integer", "minimum": 0})}
ALLOW = {"Allow": _header("The methods the path serves", {"type": "string"})}

REFUSALS: dict[str, tuple[str, Json]] = {
    "BadJson": (
        "400",
        answer(
            f"Not JSON, or JSON that cannot be stored: NaN, Infinity, NUL characters, lone "
            f"surrogates, nesting deeper than {MAX_DEPTH} levels; or an identity header (or "
            f"Authorization) sent twice or malformed",
            error_schema(ErrorCode.INVALID_REQUEST),
        ),
    ),
    "BadIdentity": (
        "400",
        answer(
            "An identity header (or Authorization) sent twice or malformed",
            error_schema(ErrorCode.INVALID_REQUEST),
        ),
    ),
    "Unauthorized": (
        "401",
        answer(
            "No trusted identity: a missing or unknown bearer token, or forwarded identity "
            "headers from an untrusted peer (docs/security.md)",
            error_schema(ErrorCode.UNAUTHENTICATED),
        ),
    ),
    "NotFound": (
        "404",
        answer("No such invocation, or another owner's", error_schema(ErrorCode.NOT_FOUND)),
    ),
    "MethodNotAllowed": (
        "405",
        answer(
            "A method this path does not serve", error_schema(ErrorCode.METHOD_NOT_ALLOWED), ALLOW
        ),
    ),
    "PayloadTooLarge": (
        "413",
        answer("Body over limits.max_body_bytes", error_schema(ErrorCode.PAYLOAD_TOO_LARGE)),
    ),
    "RequestTimeout": (
        "408",
        answer(
            "The body did not arrive whole within timers.body_read_timeout",
            error_schema(ErrorCode.REQUEST_TIMEOUT),
        ),
    ),
    "UnsupportedMediaType": (
        "415",
        answer(
            "A POST whose Content-Type is not application/json (or application/*+json): a "
            "browser form cannot start or cancel a run",
            error_schema(ErrorCode.UNSUPPORTED_MEDIA_TYPE),
        ),
    ),
    "Invalid": (
        "422",
        answer(
            "Validation failed (the message names the field)",
            error_schema(ErrorCode.INVALID_REQUEST),
        ),
    ),
    "RateLimited": (
        "429",
        answer(
            "rate_limited: the caller has limits.max_active_per_owner unfinished invocations; "
            "tenant_rate_limited: the tenant's accept rate is spent (its token bucket is "
            "empty); tenant_queue_full: the tenant has its max_queued open invocations. "
            "Nothing was written",
            error_schema(
                ErrorCode.RATE_LIMITED, ErrorCode.TENANT_RATE_LIMITED, ErrorCode.TENANT_QUEUE_FULL
            ),
            RETRY_AFTER,
        ),
    ),
    "Forbidden": (
        "403",
        answer("The caller is not one of auth.admins", error_schema(ErrorCode.FORBIDDEN)),
    ),
    "InternalError": (
        "500",
        answer("An unexpected server error (details only in the log)", error_schema()),
    ),
    "Unavailable": (
        "503",
        answer(
            "The database is unavailable: retry after Retry-After seconds",
            error_schema(ErrorCode.OVERLOADED),
            RETRY_AFTER,
        ),
    ),
    "Overloaded": (
        "503",
        answer(
            "The queue holds limits.max_queued invocations, or the database is unavailable",
            error_schema(ErrorCode.OVERLOADED),
            RETRY_AFTER,
        ),
    ),
}


def components() -> Json:
    """``components/responses``."""
    return {name: described for name, (_, described) in REFUSALS.items()}


def refusals(*names: str) -> Json:
    """Operation responses referring to the named refusals, keyed by their status. Every
    operation that reaches the database may answer 503 when it is unavailable (unless a more
    specific 503 is named)."""
    named = {REFUSALS[name][0]: {"$ref": f"#/components/responses/{name}"} for name in names}
    return {"503": {"$ref": "#/components/responses/Unavailable"}, **named}
