"""The URLs of the services Tether uses: which ones each setting takes, and how one is shown.

One rule for showing a URL, wherever it is shown: everything between ``://`` and the last ``@``
is masked, whatever it holds (a password with an unencoded ``@`` or ``/`` included), and so is
the value of any query parameter that carries a password. A URL that cannot be parsed is
refused by its setting, never quoted: its text may be mostly password.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from redis.connection import parse_url  # what redis-py's from_url reads the URL with

DATABASE_SCHEMES = ("postgresql", "postgresql+psycopg")
"""What ``database_url`` and ``worker.liveness_url`` take (``postgres`` too); the driver is
always psycopg."""
DRIVER_SCHEME = "postgresql+psycopg"
REDIS_SCHEMES = ("redis", "rediss", "unix")
"""What ``redis_url`` and ``pubsub_redis_url`` take: redis-py's TCP, TLS and Unix-socket URLs."""
MASK = "***"
UNPARSABLE = "<unparsable URL>"
ENCODE = (
    "a port is a number; in a user or password, percent-encode '@', '?' and '#' (%40, %3F, %23)"
)


def without_password(url: str) -> str:
    """``url`` with its user and password (all before the last ``@``) and the values of its
    ``...password`` query parameters replaced by ``***``; a text that is no URL is hidden."""
    scheme, found, rest = url.partition("://")
    if not found:
        return UNPARSABLE
    rest = _PASSWORD_PARAMETER.sub(rf"\1{MASK}", rest)  # first: such a value may hold an '@'
    if "@" in rest:  # (an '@' in another parameter masks more than needed, never less)
        rest = f"{MASK}@{rest.rsplit('@', 1)[1]}"
    return f"{scheme}://{rest}"


_PASSWORD_PARAMETER = re.compile(r"(?i)([?&][^=&#]*password=)[^&#]*")


def checked_database_url(url: str) -> str:
    """``url`` if it is a PostgreSQL URL Tether can use, with the psycopg driver named; else
    ValueError saying why, never quoting it."""
    scheme, found, rest = url.strip().partition("://")
    if not found or scheme.lower() not in (*DATABASE_SCHEMES, "postgres"):
        raise ValueError(
            f"must be a PostgreSQL URL ({' or '.join(s + '://' for s in DATABASE_SCHEMES)}...)"
        )
    normalized = f"{DRIVER_SCHEME}://{rest}"
    try:
        parsed = sa.make_url(normalized)
    except (sa.exc.ArgumentError, ValueError):
        parsed = None
    if parsed is None or "@" in (parsed.host or ""):
        raise ValueError(f"cannot be parsed as a PostgreSQL URL: {ENCODE}") from None
    return normalized


def checked_redis_url(url: str) -> str:
    """``url`` if it is a Redis URL Tether can use; else ValueError saying why, never quoting
    it (redis-py's own message may quote a piece of the password)."""
    scheme, found, _ = url.strip().partition("://")
    if not found or scheme.lower() not in REDIS_SCHEMES:
        raise ValueError(f"must be a Redis URL ({', '.join(s + '://' for s in REDIS_SCHEMES)}...)")
    try:
        parse_url(url.strip())  # type: ignore[no-untyped-call, unused-ignore]
    except ValueError:
        raise ValueError(f"cannot be parsed as a Redis URL: {ENCODE}") from None
    return url.strip()
