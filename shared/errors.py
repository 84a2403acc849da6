"""Stable error codes and the fixed messages clients see. Exception text never reaches a client."""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    INVALID_REQUEST = "invalid_request"
    UNAUTHENTICATED = "unauthenticated"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    CONFLICT = "conflict"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    REQUEST_TIMEOUT = "request_timeout"
    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"
    INVOCATION_FAILED = "invocation_failed"
    WORKER_LOST = "worker_lost"
    RECOVERY_LIMIT_EXCEEDED = "recovery_limit_exceeded"
    USER_AUTH_RECOVERY_UNSUPPORTED = "user_auth_recovery_unsupported"
    CANCELLED = "cancelled"
    INVALID_OUTPUT = "invalid_output"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    LIMIT_EXCEEDED = "limit_exceeded"
    BUDGET_EXCEEDED = "budget_exceeded"
    TENANT_RATE_LIMITED = "tenant_rate_limited"
    TENANT_QUEUE_FULL = "tenant_queue_full"
    FORBIDDEN = "forbidden"


MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.INVALID_REQUEST: "the request is invalid",
    ErrorCode.UNAUTHENTICATED: "the caller is not authenticated",
    ErrorCode.NOT_FOUND: "no such invocation",
    ErrorCode.METHOD_NOT_ALLOWED: "this path does not serve that method",
    ErrorCode.CONFLICT: "id was already used for another request",
    ErrorCode.PAYLOAD_TOO_LARGE: "the request body is too large",
    ErrorCode.REQUEST_TIMEOUT: "the request body did not arrive in time",
    ErrorCode.RATE_LIMITED: "too many unfinished invocations for this caller",
    ErrorCode.OVERLOADED: "the server has too much queued work",
    ErrorCode.INVOCATION_FAILED: "the invocation failed",
    ErrorCode.WORKER_LOST: "the worker running the invocation was lost",
    ErrorCode.RECOVERY_LIMIT_EXCEEDED: "the invocation was recovered too many times",
    ErrorCode.USER_AUTH_RECOVERY_UNSUPPORTED: (
        "an invocation with user credentials cannot be recovered"
    ),
    ErrorCode.CANCELLED: "the invocation was cancelled",
    ErrorCode.INVALID_OUTPUT: "the handler returned a value that is not valid JSON",
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: "the request must be sent as Content-Type: application/json",
    ErrorCode.TENANT_RATE_LIMITED: "too many new invocations for this tenant; retry later",
    ErrorCode.TENANT_QUEUE_FULL: "too many unfinished invocations for this tenant",
    ErrorCode.FORBIDDEN: "only an admin may do this",
    ErrorCode.LIMIT_EXCEEDED: (
        "the invocation exceeded a run limit (events, event bytes or running time)"
    ),
    ErrorCode.BUDGET_EXCEEDED: "the invocation's token or cost budget is spent",
}
