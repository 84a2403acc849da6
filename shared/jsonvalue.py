"""JSON values and text at the edge: strict encoding, canonical form, validation.

Everything a column or an encoding could refuse is refused here first, with a clear error, so a
bad value never reaches a database write it would share with other requests:

- JSON has no NaN or Infinity, and Python refuses integers of more than 4,300 digits;
- PostgreSQL rejects NUL (``\\u0000``) in ``text`` and ``jsonb``;
- UTF-8 cannot encode a lone surrogate (``\\ud800``, half of a UTF-16 pair such as half an emoji),
  which JSON text may spell and Python strings may hold;
- nesting deeper than Python's recursion limit cannot be encoded at all.

Every value that will be stored passes through :func:`dumps` (or, an accepted input, through
:func:`canonical` and :func:`checked`), and every text through :func:`check_text`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

MAX_DEPTH = 100
"""JSON nested deeper than this is refused (a request body) or ignored (what a model sends):
every encoder a value meets later (json, pydantic, the database drivers, :func:`storable`)
recurses, each with its own limit, pydantic's near 250, ``storable``'s near 450."""

# JSON always escapes a real NUL as \u0000; an even run of backslashes before it is literal text.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# In a Python string every surrogate code point is a lone one: a valid pair decodes to one
# character.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate. An ASCII string cannot, and ``str.isascii`` reads
    a flag CPython keeps on every string: the search (~150 us for a 67 kB conversation's JSON,
    a third of encoding it) runs only on text that has other characters."""
    return not text.isascii() and _SURROGATE.search(text) is not None


NUL_MESSAGE = "NUL characters (\\u0000) are not allowed"
SURROGATE_MESSAGE = "lone surrogates (\\ud800-\\udfff, half of a character) are not allowed"
NOT_JSON = "body is not valid JSON"
DIGITS_MESSAGE = f"integers of more than {sys.get_int_max_str_digits()} digits are not supported"


def may_nest_deeper(text: str | bytes) -> bool:
    """A cheap bound before :func:`deeper_than`: a text with fewer opening brackets than
    :data:`MAX_DEPTH` cannot nest past it."""
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{") > MAX_DEPTH
    return text.count("[") + text.count("{") > MAX_DEPTH


def finite_number(value: object) -> bool:
    """Whether ``value`` is a finite number: an int or a float, not a bool, not NaN or an
    infinity, and not a whole number past a float's range (JSON's or YAML's ``1`` followed by 400
    zeros), on which ``math.isfinite`` and every float comparison raise ``OverflowError``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


class InvalidJson(ValueError):
    """A value that cannot be stored (NaN, Infinity, NUL, a lone surrogate, or not JSON)."""


def _reject_constant(name: str) -> Any:
    raise InvalidJson(f"{name} is not valid JSON")


# Built once: ``json.dumps`` and ``json.loads`` build an encoder or a decoder on every call that
# passes an option (~1.5 us of a 3 us encoding, ~4 us of a 6 us request body's parse).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)
_CANONICAL = json.JSONEncoder(
    allow_nan=False, sort_keys=True, separators=(",", ":"), ensure_ascii=False
)


def _as_jsonb_number(text: str) -> int | float:
    """A float's JSON spelling as PostgreSQL's ``jsonb`` gives it back: a positive exponent
    (Python writes one from 1e16 up) names an integer, given back as that integer (``1e+23`` as
    10**23, not the float's nearest binary value), and ``-0.0`` as ``0.0``."""
    if "e+" in text:
        return int(Decimal(text))
    return float(text) or 0.0


_AS_STORED = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_as_jsonb_number)


def _decoded(text: str | bytes) -> str:
    """The text ``json.loads`` would parse: bytes decoded as it decodes them (UTF-8, -16 or
    -32, lone surrogates kept), a UTF-8 byte order mark refused as it refuses one."""
    if isinstance(text, str):
        if text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return text
    if not isinstance(text, bytes | bytearray):
        raise TypeError(
            f"the JSON object must be str, bytes or bytearray, not {type(text).__name__}"
        )
    return text.decode(json.detect_encoding(text), "surrogatepass")


def loads(text: str | bytes) -> Any:
    """Parse JSON text, refusing what :func:`dumps` refuses."""
    try:
        value = _DECODER.decode(_decoded(text))
    except InvalidJson:
        raise
    except RecursionError:
        raise InvalidJson("JSON is nested too deeply") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidJson(NOT_JSON) from exc
    except ValueError as exc:  # valid JSON Python will not convert: an integer past its limit
        raise InvalidJson(DIGITS_MESSAGE if _too_many_digits(exc) else NOT_JSON) from exc
    if _may_spell_unstorable(text):
        dumps(value)  # NUL and surrogate checks
    return value


def _may_spell_unstorable(text: str | bytes) -> bool:
    """Whether the value parsed from ``text`` could hold a NUL or a lone surrogate; if not,
    :func:`loads` need not encode it again to look. JSON refuses a raw NUL (a control character)
    anywhere, so either takes a ``\\u`` escape, or a surrogate written raw: in a ``str``, or in
    bytes as UTF-8 spells one (``json`` decodes bytes with ``surrogatepass``; every such
    sequence starts with byte 0xED). Bytes in UTF-16 or UTF-32, which ``json`` also reads, hold
    NUL bytes: those are checked the long way."""
    if isinstance(text, bytes | bytearray):
        return b"\\u" in text or b"\xed" in text or b"\x00" in text
    return "\\u" in text or _has_surrogate(text)


def as_stored(value: Any) -> Any:
    """A copy of ``value`` as either store gives it back: through JSON, its numbers as
    PostgreSQL's ``jsonb`` keeps them (by value, not spelling). What a durable step's first run
    returns, so it sees what every replay will; SQLite, storing this copy, gives it back alike."""
    return _AS_STORED.decode(dumps(value))


def loads_as_stored(text: str | bytes) -> Any:
    """A stored JSON text's value, its numbers as PostgreSQL's ``jsonb`` gives them back: how the
    embedded store reads its columns, so that both stores give every value back alike."""
    return _AS_STORED.decode(_decoded(text))


def dumps(value: Any) -> str:
    """Encode a value as compact JSON, refusing what PostgreSQL, UTF-8 or JSON cannot hold."""
    text = _encoded_by(_ENCODER, value)
    _check_encoded(text)
    return text


def json_bytes(value: Any) -> int:
    """A value's size as events and waits are capped by it: its compact JSON's UTF-8 bytes
    (:func:`dumps`, which refuses what cannot be stored)."""
    return len(dumps(value).encode())


def _encoded_by(encoder: json.JSONEncoder, value: Any) -> str:
    """``value`` encoded; what JSON cannot hold (NaN, Infinity, a cycle, a type it does not
    know, nesting past the recursion limit) refused as :class:`InvalidJson`."""
    try:
        return encoder.encode(value)
    except RecursionError:
        raise InvalidJson("value is nested too deeply") from None
    except ValueError as exc:
        raise InvalidJson(_value_error_message(exc)) from exc
    except TypeError as exc:
        raise InvalidJson(f"value is not JSON-serialisable: {type(value).__name__}") from exc


def _check_encoded(text: str) -> None:
    """Refuse JSON text that PostgreSQL or UTF-8 cannot hold: an escaped NUL, a lone
    surrogate."""
    if "\\u0000" in text and _ESCAPED_NUL.search(text):
        raise InvalidJson(NUL_MESSAGE)
    if _has_surrogate(text):
        raise InvalidJson(SURROGATE_MESSAGE)


class JsonText(str):
    """A value already encoded and checked, made by :func:`encoded`, :func:`checked` or
    :func:`object_text` alone: what binds it (a batch's JSON column, :mod:`tether.store.bound`;
    an event's ``text``, :func:`tether.events.encode_batch`) takes it as it is instead of
    encoding it again; ``null`` is SQL ``NULL`` in a column that stores ``None`` so
    (``none_as_null``), as ``None`` is. Never a value itself: inside a dict or list it would be
    encoded as a JSON string."""

    def __repr__(self) -> str:
        return f"JsonText({str.__repr__(self)})"  # not to be read as a string value


def encoded(value: Any) -> JsonText:
    """``value`` as :class:`JsonText`; refuses what :func:`dumps` refuses."""
    return JsonText(dumps(value))


def object_text(fields: Mapping[str, Any]) -> JsonText:
    """A JSON object of ``fields`` as :class:`JsonText`: a value that is ``JsonText`` already
    written in as it is, every other one encoded (refused as :func:`dumps` refuses)."""
    return JsonText(
        "{"
        + ",".join(
            f"{dumps(key)}:{value if isinstance(value, JsonText) else dumps(value)}"
            for key, value in fields.items()
        )
        + "}"
    )


def checked(text: str) -> JsonText:
    """``text``, which :func:`canonical` encoded, as :class:`JsonText`, once it holds nothing a
    column cannot (an escaped NUL, a lone surrogate): with ``canonical``'s own refusals, what
    :func:`dumps` refuses."""
    _check_encoded(text)
    return JsonText(text)


def check_text(text: str) -> None:
    """Refuse a string that a ``text`` column cannot hold (NUL, lone surrogates)."""
    if "\x00" in text:
        raise InvalidJson(NUL_MESSAGE)
    if _has_surrogate(text):
        raise InvalidJson(SURROGATE_MESSAGE)


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value: Any) -> Any:
    """``value`` with every NUL and lone surrogate in its strings (keys too) replaced by U+FFFD:
    for text from outside (a model's output) that must be stored whatever it holds. Returns
    ``value`` itself when nothing needed replacing."""
    if isinstance(value, str):
        if "\x00" in value or _has_surrogate(value):
            return _UNSTORABLE.sub("\ufffd", value)
        return value
    if isinstance(value, dict):
        items = [(storable(k), storable(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        out = [storable(v) for v in value]
        if all(a is b for a, b in zip(out, value, strict=True)):
            return value
        return type(value)(out)
    return value


def storable_text(text: str) -> bool:
    """Whether a ``text`` column could hold ``text`` (:func:`check_text`): a lookup by a key
    none could hold finds nothing, and must not fail the batch of reads it came in."""
    try:
        check_text(text)
    except InvalidJson:
        return False
    return True


def _too_many_digits(exc: ValueError) -> bool:
    """Python's refusal of an integer past ``sys.get_int_max_str_digits()`` digits."""
    return "digits" in str(exc)


def _value_error_message(exc: ValueError) -> str:
    """Python's reason, in our own words (its text is not for clients)."""
    reason = str(exc)
    if "Circular reference" in reason:
        return "value contains a circular reference"
    if _too_many_digits(exc):
        return DIGITS_MESSAGE
    return "NaN and Infinity are not valid JSON"


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no insignificant whitespace; refuses what JSON cannot hold
    as :func:`dumps` does (a float literal too large parses as infinity: ``1e999``), but not
    what only a column cannot (:func:`checked` refuses that)."""
    return _encoded_by(_CANONICAL, value)


def same_value(a: Any, b: Any) -> bool:
    """Whether two JSON values are equal as JSON, as PostgreSQL's ``jsonb`` compares them:
    numbers by their decimal value, whatever their spelling or Python type (``jsonb`` gives
    ``1e300`` back as ``1000…0``, an int to Python, and ``-0.0`` as ``0``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return _decimal(a) == _decimal(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(map(same_value, a, b))
    return type(a) is type(b) and a == b


def _decimal(number: int | float) -> Decimal:
    """A float as the decimal its JSON spelling means (``repr``: the shortest that reads back)."""
    return Decimal(repr(number)) if isinstance(number, float) else Decimal(number)


def request_hash(input_text: str, session_id: str | None, priority: int = 0) -> str:
    """The hash that decides whether two POSTs with one id are the same request: of the
    canonical JSON of ``{"input", "session_id"}``, given the input's :func:`canonical` text
    (which the request's row then stores as it is: the input is encoded once). ``priority``
    counts only when it is not the default, so requests stored before it existed (and every
    request without one) keep their hash."""
    priority_part = f',"priority":{canonical(priority)}' if priority else ""
    body = f'{{"input":{input_text}{priority_part},"session_id":{canonical(session_id)}}}'
    return hashlib.sha256(body.encode()).hexdigest()


def deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels deep (without recursing: level
    by level, a list of each level's containers; half the time of a stack of (container, depth)
    pairs, ~0.1 ms for a 67 kB conversation)."""
    level: list[Any] = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            for child in item.values() if isinstance(item, dict) else item:
                if isinstance(child, dict | list):
                    below.append(child)
        level = below
    return False
