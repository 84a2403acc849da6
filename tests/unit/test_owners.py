"""The owner name rule (:mod:`tether.owners`)."""

from __future__ import annotations

import re
import sys
import unicodedata

import pytest

from tether.owners import CONTROLS, MAX_OWNER_CHARS, SURROGATES, owner_name_problem


@pytest.mark.parametrize(
    ("pattern", "category"), [(SURROGATES, "Cs"), (CONTROLS, "Cc")], ids=["Cs", "Cc"]
)
def test_each_pattern_matches_exactly_its_unicode_category(
    pattern: re.Pattern[str], category: str
) -> None:
    every = (chr(point) for point in range(sys.maxunicode + 1))
    expected = [ch for ch in every if unicodedata.category(ch) == category]
    matched = pattern.findall("".join(chr(p) for p in range(sys.maxunicode + 1)))
    assert matched == expected


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "is empty"),
        ("ann\udcff", "is not valid UTF-8"),
        ("ann\x00", "contains control characters"),
        ("ann\x85", "contains control characters"),
        ("ann\u2028", None),  # a line separator is Zl, not Cc: allowed, as before
        ("\udcff\x00", "is not valid UTF-8"),  # the checks' order: surrogates first
        ("\x00" + "a" * (MAX_OWNER_CHARS + 1), "contains control characters"),
        ("a" * (MAX_OWNER_CHARS + 1), f"is longer than {MAX_OWNER_CHARS} characters"),
        ("a" * MAX_OWNER_CHARS, None),
        ("Zoë Ünal", None),
    ],
)
def test_owner_names_are_refused_for_the_first_problem_found(
    name: str, problem: str | None
) -> None:
    assert owner_name_problem(name) == problem
