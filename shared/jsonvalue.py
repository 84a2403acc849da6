"""JSON values at the edge: strict encoding, canonical form, validation.

PostgreSQL's JSONB rejects ``\\u0000``, JSON itself has no NaN or Infinity, and UTF-8 cannot carry
a lone surrogate (``"\\ud800"`` parses, but no database or client can take it), so every value
that will be stored passes through :func:`dumps` first and is refused with a clear error. What
clients send is also refused past :data:`MAX_DEPTH` levels of nesting: every encoder on the way
(``json``, pydantic, the database drivers) recurses, and each has its own, lower, limit.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

# JSON always escapes a real NUL as \u0000; an even run of backslashes before it is literal text.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
MAX_DEPTH = 100
"""Arrays and objects nested deeper than this are refused by :func:`loads`."""
TOO_DEEP = f"JSON nested more than {MAX_DEPTH} levels deep is not accepted"


class InvalidJson(ValueError):
    """A value that cannot be stored as JSON (NaN, Infinity, NUL, or not JSON at all)."""


def _reject_constant(name: str) -> Any:
    raise InvalidJson(f"{name} is not valid JSON")


def loads(text: str | bytes) -> Any:
    """Parse JSON text, refusing NaN/Infinity, NUL characters, lone surrogates and nesting
    deeper than :data:`MAX_DEPTH`."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except InvalidJson:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidJson("body is not valid JSON") from exc
    except RecursionError:
        raise InvalidJson(TOO_DEEP) from None
    if _may_nest_deeper(text) and _deeper_than(value, MAX_DEPTH):
        raise InvalidJson(TOO_DEEP)
    dumps(value)  # NUL and surrogate check
    return value


def _may_nest_deeper(text: str | bytes) -> bool:
    """A cheap bound: fewer opening brackets than the limit cannot nest past it."""
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{") > MAX_DEPTH
    return text.count("[") + text.count("{") > MAX_DEPTH


def _deeper_than(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def dumps(value: Any) -> str:
    """Encode a value as compact JSON, refusing what PostgreSQL or JSON cannot hold."""
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except ValueError as exc:
        raise InvalidJson("NaN and Infinity are not valid JSON") from exc
    except TypeError as exc:
        raise InvalidJson(f"value is not JSON-serialisable: {type(value).__name__}") from exc
    except RecursionError:
        raise InvalidJson("the value is nested too deeply to encode") from None
    if "\\u0000" in text and _ESCAPED_NUL.search(text):
        raise InvalidJson("NUL characters (\\u0000) are not allowed")
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            raise InvalidJson("lone surrogates (\\ud800-\\udfff) are not allowed") from None
    return text


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no insignificant whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(input_value: Any, session_id: str | None) -> str:
    """The hash that decides whether two POSTs with one id are the same request."""
    body = canonical({"input": input_value, "session_id": session_id})
    return hashlib.sha256(body.encode()).hexdigest()
