"""Reading what a request carries, strictly: JSON-only POSTs, the body, query strings and headers.

Each refusal is a clear 4xx in the one error shape, raised before anything is stored or queued.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import BaseModel, TypeAdapter, ValidationError

from tether.errors import ErrorCode
from tether.gateway.models import MAX_CURSOR, Cursor
from tether.gateway.responses import ApiError
from tether.jsonvalue import MAX_DEPTH, InvalidJson, deeper_than, loads, may_nest_deeper

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_CURSOR: TypeAdapter[int] = TypeAdapter(Cursor)
TOO_DEEP = f"JSON nested more than {MAX_DEPTH} levels deep is not accepted"


def is_json_media_type(content_type: str) -> bool:
    """``application/json`` or any ``application/*+json`` (parameters already stripped)."""
    kind, _, subtype = content_type.lower().partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


def json_only(posts: Collection[Handler]) -> Middleware:
    """Middleware: 415 for a POST to one of ``posts`` (Tether's own routes, not custom ones)
    that is not declared JSON, before its body is read. Browsers send forms (``text/plain``,
    ``application/x-www-form-urlencoded``, ``multipart/form-data``) and body-less ``fetch``
    calls cross-site without asking first; none of them may start or cancel a run."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "POST" and request.match_info.route.handler in posts:
            declared = "Content-Type" in request.headers
            if not declared or not is_json_media_type(request.content_type):
                raise ApiError(ErrorCode.UNSUPPORTED_MEDIA_TYPE)
        return await handler(request)

    return middleware


async def read_json(request: web.Request) -> Any:
    """The body as strict JSON: 413 past the size limit, 400 when it is not JSON we can store."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(ErrorCode.PAYLOAD_TOO_LARGE) from None
    try:
        value = loads(raw)
    except InvalidJson as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, status=400, message=str(exc)) from None
    if may_nest_deeper(raw) and deeper_than(value, MAX_DEPTH):
        raise ApiError(ErrorCode.INVALID_REQUEST, status=400, message=TOO_DEEP)
    return value


def validated(model: type[M], data: Any, what: str = "body") -> M:
    """``data`` as ``model``, or 422 saying which field is wrong (never echoing the input)."""
    if not isinstance(data, dict):
        raise ApiError(ErrorCode.INVALID_REQUEST, message=f"{what} must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, message=validation_message(exc)) from None


def validation_message(exc: ValidationError) -> str:
    found = [
        (
            ".".join(str(p) for p in err["loc"] if _names_a_place(p)) or "body",
            err["type"],
            err["msg"],
        )
        for err in exc.errors(include_input=False, include_url=False, include_context=False)
    ]
    parts: list[str] = []
    for where, kind, text in found:
        if _is_a_mismatch(kind) and _another_member_took_it(where, found):
            continue
        if kind == "model_type":  # pydantic names the model class: "… or instance of X"
            text = "Input should be an object"
        part = f"{where}: {text}"
        if part not in parts:
            parts.append(part)
    return "; ".join(parts)


def _is_a_mismatch(kind: str) -> bool:
    """Pydantic's 'Input should be a valid …' (or None): the value is not of a member's type."""
    return kind.endswith("_type") or kind == "none_required"


def _another_member_took_it(where: str, found: list[tuple[str, str, str]]) -> bool:
    """Whether another member of a union at ``where`` took the value and found a fault in it
    (one of its own, or one deeper): that this member's type did not match is then noise (a
    string too long is not also 'not a valid list')."""
    deeper = where + "."
    return any(
        place.startswith(deeper) or (place == where and not _is_a_mismatch(kind))
        for place, kind, _ in found
    )


FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
UNION_TAGS = frozenset({"str", "int", "float", "bool", "none", "bytes", "list", "dict"})


def _names_a_place(part: str | int) -> bool:
    """Whether a part of pydantic's error location is a field or an index, not the name it
    gives a union's member (``function-after[...]`` spells out validators, their addresses
    included; ``str``, ``list[ResponsesItem]``)."""
    if isinstance(part, int):
        return True
    return FIELD_NAME.fullmatch(part) is not None and part not in UNION_TAGS


def query_of(request: web.Request) -> dict[str, str]:
    """The query string, each name at most once: a name given twice is refused, never read as
    the first or the last of its values (a proxy and Tether could otherwise each read one)."""
    query = request.query
    if len(query) > 1 and len(set(query)) < len(query):
        twice = next(name for name in query if len(query.getall(name)) > 1)
        named = repr(twice) if FIELD_NAME.fullmatch(twice) else "a parameter"
        raise ApiError(ErrorCode.INVALID_REQUEST, message=f"query: {named} is given more than once")
    return dict(query)


def cursor(raw: str, name: str) -> int:
    """A cursor from a query string or header: an integer in 0..2^63-1, ASCII digits only."""
    try:
        return _CURSOR.validate_python(raw)
    except ValidationError:
        raise ApiError(
            ErrorCode.INVALID_REQUEST,
            message=f"{name} must be an integer between 0 and {MAX_CURSOR}",
        ) from None
