from __future__ import annotations

import math

import pytest

from tether.jsonvalue import InvalidJson, canonical, dumps, loads, request_hash


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
    assert request_hash({"a": 1, "b": 2}, None) == request_hash({"b": 2, "a": 1}, None)
    assert request_hash(1, "s") != request_hash(1, None)
