from __future__ import annotations

import hashlib
import json
import math
import sqlite3

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect

from tether.jsonvalue import (
    InvalidJson,
    JsonText,
    canonical,
    check_text,
    checked,
    dumps,
    encoded,
    finite_number,
    loads,
    request_hash,
    same_value,
)
from tether.store.bound import BoundBatch, Carriage
from tether.store.dialect import SQLite


@pytest.mark.parametrize(
    "text", ["NaN", "[Infinity]", '{"a": -Infinity}', '"a\\u0000"', '{"k\\u0000": 1}', "{", ""]
)
def test_loads_refuses_what_postgres_or_json_cannot_hold(text: str) -> None:
    with pytest.raises(InvalidJson):
        loads(text)


def test_a_literal_backslash_u0000_is_fine() -> None:
    assert loads('"a\\\\u0000"') == "a\\u0000"
    assert dumps("\\\\u0000") == '"\\\\\\\\u0000"'


@pytest.mark.parametrize("value", [math.nan, [math.inf], {"x": object()}, "nul\x00"])
def test_dumps_refuses_values_that_are_not_json(value: object) -> None:
    with pytest.raises(InvalidJson):
        dumps(value)


def test_canonical_form_ignores_key_order_and_whitespace() -> None:
    assert canonical({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == '{"a":[1,{"c":3,"d":2}],"b":1}'
    a, b = canonical({"a": 1, "b": 2}), canonical({"b": 2, "a": 1})
    assert request_hash(a, None) == request_hash(b, None)
    assert request_hash("1", "s") != request_hash("1", None)


@pytest.mark.parametrize(
    ("value", "session_id", "priority"),
    [
        ({"b": [1, {"d": None, "c": "é"}], "a": True}, None, 0),
        ("text \u4e2d \U0001f600", "s-1", 3),
        (None, "x", -2),
        ([], None, 1),
        (10**18, "\u00e9", 0),
    ],
)
def test_the_request_hash_is_the_one_stored_requests_have(
    value: object, session_id: str | None, priority: int
) -> None:
    """Spliced from the input's canonical text, it is the hash of the canonical fields, as every
    hash stored before was: a repeated request still finds its row."""
    fields: dict[str, object] = {"input": value, "session_id": session_id}
    if priority:
        fields["priority"] = priority
    stored = hashlib.sha256(canonical(fields).encode()).hexdigest()
    assert request_hash(canonical(value), session_id, priority) == stored


@pytest.mark.parametrize("value", [{"k": "nul\x00"}, ["\udc00"]])
def test_a_canonical_text_is_checked_as_dumps_checks(value: object) -> None:
    with pytest.raises(InvalidJson):
        dumps(value)
    with pytest.raises(InvalidJson):
        checked(canonical(value))
    assert checked(canonical({"b": 1, "a": 2})) == '{"a":2,"b":1}'


@pytest.mark.parametrize("value", ["half an emoji \ud83d", {"k": ["\udc00"]}, {"\ud800": 1}])
def test_dumps_refuses_lone_surrogates(value: object) -> None:
    with pytest.raises(InvalidJson, match="surrogate"):
        dumps(value)


def test_dumps_refuses_integers_python_will_not_print() -> None:
    with pytest.raises(InvalidJson, match="digits"):
        dumps([10**5000])


def test_loads_says_an_integer_past_pythons_digits_is_too_long_not_invalid() -> None:
    assert loads("1" * 4300) == int("1" * 4300)
    with pytest.raises(InvalidJson, match="more than 4300 digits"):
        loads("[" + "1" * 4301 + "]")  # valid JSON, which Python will not convert
    with pytest.raises(InvalidJson, match="not valid JSON"):
        loads("[1,")


def test_a_whole_emoji_is_fine_whichever_way_json_spells_it() -> None:
    assert loads('"\\ud83d\\ude00"') == "\U0001f600" == loads('"\U0001f600"')
    assert dumps("\U0001f600") == '"\U0001f600"'


@pytest.mark.parametrize("text", ['"\\ud800"', '["a", "\\udfff b"]', '{"\\udc00": 1}'])
def test_loads_refuses_a_lone_surrogate_spelled_in_json(text: str) -> None:
    with pytest.raises(InvalidJson, match="surrogate"):
        loads(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('"raw \ud800"', "surrogate"),  # a str holding a lone surrogate, not spelled as \u
        (b'"a\\u0000b"', "NUL"),  # UTF-8 bytes with the escape
        (b'"CESU \xed\xa0\x80"', "surrogate"),  # UTF-8 bytes of a lone surrogate
        ('{"k": "a\\u0000"}'.encode("utf-16"), "NUL"),  # UTF-16: the escape's bytes hold NULs
        ('["\\udfff"]'.encode("utf-32-le"), "surrogate"),
    ],
)
def test_loads_refuses_nul_and_lone_surrogates_however_the_text_carries_them(
    text: str | bytes, reason: str
) -> None:
    with pytest.raises(InvalidJson, match=reason):
        loads(text)


@pytest.mark.parametrize(
    "text", [b'{"a": "plain", "b": [1, 2.5, null]}', '{"a": "\u00e9t\u00e9"}', '"\ud55c"'.encode()]
)
def test_loads_takes_text_that_holds_neither(text: str | bytes) -> None:
    assert loads(text) == json.loads(text)


def test_nesting_too_deep_to_encode_is_refused_not_crashed() -> None:
    with pytest.raises(InvalidJson, match="nested"):
        loads("[" * 200_000 + "]" * 200_000)
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InvalidJson, match="nested"):
        dumps(deep)


@pytest.mark.parametrize("text", ["a\x00b", "\ud800", "x\udfffy"])
def test_check_text_refuses_what_a_text_column_cannot_hold(text: str) -> None:
    with pytest.raises(InvalidJson):
        check_text(text)
    check_text("ann@example.com ✓ \U0001f600")


@pytest.mark.parametrize("value", ["plain ascii", {"k": ["é", "😀"]}, ["\u00e9" * 3]])
def test_text_with_no_lone_surrogate_is_kept_ascii_or_not(value: object) -> None:
    assert loads(dumps(value)) == value


def test_a_batch_binds_an_encoded_value_as_it_is_and_encodes_the_rest() -> None:
    """What :func:`encoded` made is not encoded again: the same parameter as the value's. In
    PostgreSQL's batch and in SQLite's (3.38 and newer) a JSON value is JSON in the row, in
    older SQLite's a string holding its text; None is SQL ``NULL`` in that one's where the column
    says so."""
    batch = BoundBatch(
        "rows",
        (
            sa.column("id", sa.Text),
            sa.column("doc", sa.JSON),
            sa.column("n", sa.Integer),
            sa.column("maybe", sa.JSON(none_as_null=True)),
        ),
    )
    value = {"messages": [{"role": "user", "content": "hi"}]}
    rows = [("a", value, 1, None), ("b", [], 2, value), ("c", None, 3, "null")]
    ready = [("a", encoded(value), 1, encoded(None)), ("b", encoded([]), 2, encoded(value))]
    ready.append(("c", encoded(None), 3, encoded("null")))
    for carriage in Carriage:
        assert batch.params(ready, carriage=carriage) == batch.params(rows, carriage=carriage)
    for carriage in (Carriage.JSONB, Carriage.SQLITE_JSON):
        assert loads(batch.params(rows, carriage=carriage)["rows"]) == [list(r) for r in rows]
    assert loads(batch.params(rows, carriage=Carriage.SQLITE_TEXT)["rows"]) == [
        ["a", dumps(value), 1, None],
        ["b", "[]", 2, dumps(value)],
        ["c", "null", 3, '"null"'],
    ]
    assert isinstance(encoded(value), JsonText) and encoded(value) == dumps(value)
    with pytest.raises(InvalidJson, match="surrogate"):
        encoded({"k": "\udc00"})


def test_sqlite_takes_a_json_value_out_as_json_where_it_has_arrows() -> None:
    """SQLite 3.38 added ``->``, which gives a value of a batch as its JSON text; an older one
    gets the value as a string holding its text, and ``json_extract`` gives that string back."""
    expected = (
        Carriage.SQLITE_JSON if sqlite3.sqlite_version_info >= (3, 38) else Carriage.SQLITE_TEXT
    )
    assert SQLite.carriage is expected
    batch = BoundBatch("rows", (sa.column("id", sa.Text), sa.column("doc", sa.JSON)))

    def sql(carriage: Carriage) -> str:
        return str(sa.select(batch.cte(carriage)).compile(dialect=sqlite_dialect()))

    assert "json_extract(anon_1.value, '$[0]') AS id" in sql(Carriage.SQLITE_JSON)
    assert "anon_1.value -> '$[1]' AS doc" in sql(Carriage.SQLITE_JSON)
    assert "json_extract(anon_1.value, '$[1]') AS doc" in sql(Carriage.SQLITE_TEXT)


def test_same_value_compares_numbers_by_value_as_jsonb_does() -> None:
    """What jsonb gives back for a number it stored is the same value, spelt its own way."""
    assert same_value(1e300, 10**300) and same_value(-0.0, 0) and same_value(1, 1.0)
    assert same_value({"a": [1.5e20, "x", None]}, {"a": [150000000000000000000, "x", None]})
    assert not same_value(1e300, 10**300 + 1) and not same_value(0.1, 0.1000001)
    assert not same_value(True, 1) and not same_value(0, False) and not same_value(None, 0)
    assert not same_value("1", 1) and not same_value([1], [1, 1]) and not same_value({"a": 1}, {})


HUGE = 10**400  # JSON's or YAML's 1 followed by 400 zeros: an int past a float's range


@pytest.mark.parametrize(
    ("value", "finite"),
    [(1, True), (-2.5, True), (10**300, True), (HUGE, False), (-HUGE, False), (math.nan, False)]
    + [(math.inf, False), (True, False), ("1", False), (None, False)],
)
def test_a_finite_number_is_an_int_or_float_a_float_can_hold(value: object, finite: bool) -> None:
    assert finite_number(value) is finite


def test_every_number_check_refuses_a_whole_number_past_a_floats_range() -> None:
    """Each raised OverflowError from ``math.isfinite``: a failed load or run, not a refusal."""
    from tether.agents.approvals import checked_timeout
    from tether.agents.errors import DefinitionError
    from tether.agents.mcp.servers import mcp_server
    from tether.usage import ModelPrice

    assert checked_timeout(HUGE, "agent a") is None  # the default, with a warning
    with pytest.raises(ValueError, match="finite number"):
        ModelPrice(HUGE)
    with pytest.raises(DefinitionError, match="'timeout' must be a positive number"):
        mcp_server("notes", "https://mcp.example/mcp", timeout_s=HUGE)
