"""What an owner name may be: one rule for bearer token names and forwarded identities.

An owner is stored as given and compared exactly, so a name is never cut short (two long names
would collide) and never altered: a name that breaks the rule is refused where it comes in.
"""

from __future__ import annotations

import unicodedata

MAX_OWNER_CHARS = 256
SINGLE_USER = "anonymous"
"""The one owner of a server without authentication (``auth.mode: none``)."""


def owner_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an owner (a phrase to follow the name's source), or None."""
    if not name:
        return "is empty"
    if any(unicodedata.category(ch) == "Cs" for ch in name):
        # aiohttp decodes header bytes with surrogateescape: bytes that are not UTF-8 land here
        return "is not valid UTF-8"
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        return "contains control characters"
    if len(name) > MAX_OWNER_CHARS:
        return f"is longer than {MAX_OWNER_CHARS} characters"
    return None
