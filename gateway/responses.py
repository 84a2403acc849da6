"""JSON responses in Tether's one error shape."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tether.errors import ErrorCode, error_body
from tether.jsonvalue import dumps

STATUS_FOR: dict[ErrorCode, int] = {
    ErrorCode.INVALID_REQUEST: 422,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.REQUEST_TIMEOUT: 408,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.OVERLOADED: 503,
    ErrorCode.CANCELLED: 409,
}


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        text=dumps(body), status=status, content_type="application/json", headers=headers
    )


def error_response(
    code: ErrorCode,
    *,
    http_status: int | None = None,
    message: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> web.Response:
    """The error shape; ``extra`` fields (e.g. ``id``, ``status``) go beside ``error``."""
    body = {**extra, **error_body(code, message)}
    return json_response(body, http_status or STATUS_FOR.get(code, 500), headers)


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
