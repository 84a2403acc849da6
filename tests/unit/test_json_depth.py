"""The gateway's nesting limit, counted level by level over objects and arrays alike."""

from __future__ import annotations

from typing import Any

import pytest

from tether.jsonvalue import deeper_than


def nested(depth: int) -> Any:
    """``depth`` levels, objects and arrays alternating, with scalars and a wide level beside."""
    value: Any = "leaf"
    for level in range(depth):
        value = {"k": value, "n": 1} if level % 2 else [value, None, 2]
    return value


@pytest.mark.parametrize("depth", [1, 2, 7, 8])
def test_a_value_exactly_at_the_limit_passes_and_one_level_more_does_not(depth: int) -> None:
    assert not deeper_than(nested(depth), depth)
    assert deeper_than(nested(depth + 1), depth)


def test_scalars_and_wide_shallow_values_are_not_deep() -> None:
    assert not deeper_than("text", 0) and not deeper_than(None, 0)
    assert deeper_than([], 0) and not deeper_than([], 1)
    wide = {"messages": [{"role": "user", "content": "x"} for _ in range(1_000)]}
    assert not deeper_than(wide, 3) and deeper_than(wide, 2)


def test_the_deepest_branch_counts_wherever_it_is() -> None:
    value = [[1], [[2]], {"a": {"b": {"c": [3]}}}]
    assert not deeper_than(value, 5) and deeper_than(value, 4)
