"""What a command says when PostgreSQL or Redis cannot be used: which service, where (its password
masked), and what to do about it. Never the driver's text, never a traceback."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, InterfaceError, OperationalError, ProgrammingError

from tether.settings import Settings

UNDEFINED_TABLE = "42P01"  # PostgreSQL's SQLSTATE for a missing table
SERVICE_ERRORS = (
    OperationalError,
    InterfaceError,
    ProgrammingError,
    RedisConnectionError,
    RedisTimeoutError,
)


def without_password(url: str) -> str:
    """``url`` with its password replaced by ``***`` (the whole URL hidden if it does not parse)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable URL>"


def service_error_message(error: BaseException, settings: Settings) -> str | None:
    """One line for a service error a command raised, or None when it is not about reaching or
    preparing a service (a bug, to be raised as is)."""
    database = without_password(settings.database_url)
    if isinstance(error, OperationalError | InterfaceError):
        cause = type(error.orig or error).__name__
        return (
            f"cannot use PostgreSQL at {database} ({cause}): start it, or point "
            "TETHER_DATABASE_URL (database_url in --config) at one"
        )
    if isinstance(error, ProgrammingError):
        if getattr(error.orig, "sqlstate", None) != UNDEFINED_TABLE:
            return None
        return f"the database at {database} has no Tether tables: run `tether migrate` first"
    if isinstance(error, RedisConnectionError | RedisTimeoutError):
        return (
            f"cannot reach Redis at {without_password(settings.redis_url)} "
            f"({type(error).__name__}): start it, or point TETHER_REDIS_URL (redis_url in "
            "--config) at one"
        )
    return None
