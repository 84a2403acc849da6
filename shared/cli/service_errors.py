"""What a command says when PostgreSQL, Redis or the SQLite file of ``tether dev`` cannot be
used: which, where (a URL's user and password masked), and what to do about it. Never the
driver's text, never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tether.service_urls import without_password
from tether.settings import Settings
from tether.store.errors import LockNotGranted, SchemaMissing, StoreError, StoreUnavailable
from tether.store.store import Store

SERVICE_ERRORS = (StoreUnavailable, SchemaMissing, RedisConnectionError, RedisTimeoutError)
SQLITE_HEADER = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file."""


def service_error_message(error: BaseException, settings: Settings) -> str | None:
    """One line for a service error a command raised, or None when it is not about reaching or
    preparing a service (a bug, to be raised as is)."""
    database = without_password(settings.database_url)
    if isinstance(error, LockNotGranted):
        return (
            f"PostgreSQL at {database} did not grant a lock within lock_timeout (another "
            "transaction held it; the transaction that waited rolled back): run the command "
            "again, at a quieter moment or with a longer lock_timeout"
        )
    if isinstance(error, StoreUnavailable):
        return (
            f"cannot use PostgreSQL at {database} ({_cause(error)}): start it, or point "
            "TETHER_DATABASE_URL (database_url in --config) at one"
        )
    if isinstance(error, SchemaMissing):
        return f"the database at {database} has no Tether tables: run `tether migrate` first"
    if isinstance(error, RedisConnectionError | RedisTimeoutError):
        if settings.pubsub_redis == settings.redis_url:
            where, names = without_password(settings.redis_url), "TETHER_REDIS_URL (redis_url"
        else:  # the driver's text would say which, and is never shown: name both
            where = (
                f"{without_password(settings.redis_url)} (broker) or "
                f"{without_password(settings.pubsub_redis)} (pub/sub)"
            )
            names = "TETHER_REDIS_URL or TETHER_PUBSUB_REDIS_URL (redis_url or pubsub_redis_url"
        return (
            f"cannot reach Redis at {where} ({type(error).__name__}): start it, or point "
            f"{names} in --config) at one"
        )
    return None


def unusable_sqlite_file(path: str) -> str | None:
    """One line saying why the SQLite file at ``path`` cannot be used, before it is opened, as
    far as the file system tells; None when it may be (a missing file in a folder is created)."""
    problem = _sqlite_file_problem(path)
    return None if problem is None else _sqlite_message(path, problem)


def sqlite_error_message(error: StoreError, path: str) -> str:
    """One line for a store error of a command on the SQLite file at ``path``: opening or
    migrating it failed, so the file is what is wrong (said from the file itself where it can
    be, else the driver's error class)."""
    return _sqlite_message(path, _sqlite_file_problem(path) or _cause(error))


def _sqlite_message(path: str, problem: str) -> str:
    return f"cannot use the SQLite file {path} ({problem}): choose another with --db"


def _sqlite_file_problem(path: str) -> str | None:
    if path == Store.THROWAWAY:
        return None
    file = Path(path)
    if file.is_dir():
        return "it is a folder"
    if not file.parent.is_dir():
        return "its folder does not exist"
    try:
        with file.open("rb") as opened:
            head = opened.read(len(SQLITE_HEADER))
    except FileNotFoundError:  # created: SQLite writes the file and its journal beside it
        return None if os.access(file.parent, os.W_OK) else "its folder is read-only"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    if head not in (b"", SQLITE_HEADER):
        return "it is not an SQLite database"
    if not (os.access(file, os.W_OK) and os.access(file.parent, os.W_OK)):
        return "it or its folder is read-only"
    return None


def _cause(error: StoreError) -> str:
    return str(error).split(":", 1)[0]  # the driver's error class, never its text
