"""JSON values at the edge: strict encoding, canonical form, validation.

PostgreSQL's JSONB rejects ``\\u0000`` and JSON itself has no NaN or Infinity, so every value that
will be stored passes through :func:`dumps` first and is refused with a clear error.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

# JSON always escapes a real NUL as \u0000; an even run of backslashes before it is literal text.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class InvalidJson(ValueError):
    """A value that cannot be stored as JSON (NaN, Infinity, NUL, or not JSON at all)."""


def _reject_constant(name: str) -> Any:
    raise InvalidJson(f"{name} is not valid JSON")


def loads(text: str | bytes) -> Any:
    """Parse JSON text, refusing NaN/Infinity and NUL characters."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except InvalidJson:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidJson("body is not valid JSON") from exc
    dumps(value)  # NUL check
    return value


def dumps(value: Any) -> str:
    """Encode a value as compact JSON, refusing what PostgreSQL or JSON cannot hold."""
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except ValueError as exc:
        raise InvalidJson("NaN and Infinity are not valid JSON") from exc
    except TypeError as exc:
        raise InvalidJson(f"value is not JSON-serialisable: {type(value).__name__}") from exc
    if "\\u0000" in text and _ESCAPED_NUL.search(text):
        raise InvalidJson("NUL characters (\\u0000) are not allowed")
    return text


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no insignificant whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(input_value: Any, session_id: str | None) -> str:
    """The hash that decides whether two POSTs with one id are the same request."""
    body = canonical({"input": input_value, "session_id": session_id})
    return hashlib.sha256(body.encode()).hexdigest()
