"""What an owner name may be: one rule for bearer token names and forwarded identities.

An owner is stored as given and compared exactly, so a name is never cut short (two long names
would collide) and never altered: a name that breaks the rule is refused where it comes in.
"""

from __future__ import annotations

import re

MAX_OWNER_CHARS = 256
SURROGATES = re.compile("[\ud800-\udfff]")
"""Unicode's category Cs. aiohttp decodes header bytes with surrogateescape: bytes that are not
UTF-8 land here."""
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
"""Unicode's category Cc, which holds exactly these (``tests/unit/test_owners.py`` checks both
against ``unicodedata`` over every code point). One search each, where asking
``unicodedata.category`` of every character took 1 % of ``tether dev``'s CPU under a burst."""
SINGLE_USER = "anonymous"
"""The one owner of a server without authentication (``auth.mode: none``)."""


def owner_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an owner (a phrase to follow the name's source), or None."""
    if not name:
        return "is empty"
    if SURROGATES.search(name):
        return "is not valid UTF-8"
    if CONTROLS.search(name):
        return "contains control characters"
    if len(name) > MAX_OWNER_CHARS:
        return f"is longer than {MAX_OWNER_CHARS} characters"
    return None
