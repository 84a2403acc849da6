"""JSON answers, each built from a model of :mod:`tether.gateway.models`, errors in one shape."""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel

from tether.errors import ErrorCode
from tether.gateway.models import ErrorResponse
from tether.jsonvalue import dumps

STATUS_FOR: dict[ErrorCode, int] = {
    ErrorCode.INVALID_REQUEST: 422,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.REQUEST_TIMEOUT: 408,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.TENANT_RATE_LIMITED: 429,
    ErrorCode.TENANT_QUEUE_FULL: 429,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.OVERLOADED: 503,
    ErrorCode.CANCELLED: 409,
}


def json_response(
    body: BaseModel, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """``body`` on the wire. Encoded by :func:`tether.jsonvalue.dumps` rather than pydantic's own
    JSON encoder, which refuses outputs nested past ~250 levels that the store holds fine."""
    return web.Response(
        text=dumps(body.model_dump(mode="python")),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def error_response(
    code: ErrorCode,
    *,
    http_status: int | None = None,
    message: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    return json_response(
        ErrorResponse.of(code, message), http_status or STATUS_FOR.get(code, 500), headers
    )


class ApiError(Exception):
    """Raised inside a handler; the error middleware turns it into the JSON error response."""

    def __init__(
        self,
        code: ErrorCode,
        *,
        status: int | None = None,
        message: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(code.value)
        self.code = code
        self.status = status
        self.message = message
        self.headers = headers

    def response(self) -> web.Response:
        return error_response(
            self.code, http_status=self.status, message=self.message, headers=self.headers
        )
