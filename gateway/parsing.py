"""Reading what a request carries, strictly: JSON-only POSTs, the body, query strings and headers.

Each refusal is a clear 4xx in the one error shape, raised before anything is stored or queued.
"""

from __future__ import annotations

from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, TypeAdapter, ValidationError

from tether.errors import ErrorCode
from tether.gateway.models import MAX_CURSOR, Cursor
from tether.gateway.responses import ApiError
from tether.jsonvalue import InvalidJson, loads

M = TypeVar("M", bound=BaseModel)
_CURSOR: TypeAdapter[int] = TypeAdapter(Cursor)


def is_json_media_type(content_type: str) -> bool:
    """``application/json`` or any ``application/*+json`` (parameters already stripped)."""
    kind, _, subtype = content_type.lower().partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


def require_json(request: web.Request) -> None:
    """415 for a POST that is not declared JSON. Browsers send forms (``text/plain``,
    ``application/x-www-form-urlencoded``, ``multipart/form-data``) and body-less ``fetch``
    calls cross-site without asking first; none of them may start or cancel a run."""
    if "Content-Type" not in request.headers or not is_json_media_type(request.content_type):
        raise ApiError(ErrorCode.UNSUPPORTED_MEDIA_TYPE)


async def read_json(request: web.Request) -> Any:
    """The body as strict JSON: 413 past the size limit, 400 when it is not JSON we can store."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(ErrorCode.PAYLOAD_TOO_LARGE) from None
    try:
        return loads(raw)
    except InvalidJson as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, status=400, message=str(exc)) from None


def validated(model: type[M], data: Any, what: str = "body") -> M:
    """``data`` as ``model``, or 422 saying which field is wrong (never echoing the input)."""
    if not isinstance(data, dict):
        raise ApiError(ErrorCode.INVALID_REQUEST, message=f"{what} must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, message=validation_message(exc)) from None


def validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_input=False, include_url=False, include_context=False):
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def cursor(raw: str, name: str) -> int:
    """A cursor from a query string or header: an integer in 0..2^63-1, ASCII digits only."""
    try:
        return _CURSOR.validate_python(raw)
    except ValidationError:
        raise ApiError(
            ErrorCode.INVALID_REQUEST,
            message=f"{name} must be an integer between 0 and {MAX_CURSOR}",
        ) from None
