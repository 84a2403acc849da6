"""What the store raises: its verdicts, and the driver's errors wrapped at the seam.

Every connection the store opens goes through :func:`wrapped`, so a caller never sees a driver
exception (SQLAlchemy, psycopg, sqlite3, an encoder's ``UnicodeEncodeError``) and never needs a
bare ``except Exception`` to survive one. A :class:`StoreError`'s text names the driver's error
class and the first line of its message: it is for the log only. Clients get a fixed message.
The driver's exception is not chained either, so the rest of its text (PostgreSQL's ``DETAIL``
quotes the failing row, another user's input) never reaches a log.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

import sqlalchemy as sa

from tether.jsonvalue import InvalidJson

MAX_LOGGED_CHARS = 200

# SQLSTATE classes (PostgreSQL): the value was refused, or the server could not do the work.
REFUSED_CLASSES = frozenset({"22", "23", "54"})  # data exception, constraint, program limit
UNAVAILABLE_CLASSES = frozenset({"08", "25", "40", "53", "57", "58"})
UNDEFINED_TABLE = "42P01"
LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout passed, or NOWAIT found the lock taken


class Superseded(Exception):
    """The attempt no longer owns its invocation (replaced, finished or cancelled)."""


class Conflict(Exception):
    """The id was already used for a different request (or by another owner)."""


class OwnerLimitReached(Exception):
    """The owner already has the maximum number of unfinished invocations."""


class TenantLimitReached(Exception):
    """The tenant already has its ``max_queued`` open invocations."""

    def __init__(self, tenant: str) -> None:
        super().__init__(tenant)
        self.tenant = tenant


class StoreError(Exception):
    """The database failed a write or a read. ``str()`` is for the log, never for a client."""


class StoreUnavailable(StoreError):
    """The database could not do the work now (connection lost, timeout, locked, shutting
    down): nothing was written, and the same write may succeed later."""


class LockNotGranted(StoreUnavailable):
    """A lock the statement waited for was not granted in time (PostgreSQL's ``lock_timeout``):
    another transaction held it. The transaction rolled back; run it again later."""


class SchemaMissing(StoreError):
    """The database has no Tether tables (or not all of them): ``tether migrate`` was not run."""


class ValueRefused(StoreError):
    """The database, or the encoding on the way to it, refused a value of this one write;
    repeating it cannot help. ``public_message`` is safe to show the client who sent it."""

    def __init__(self, log_message: str, public_message: str) -> None:
        super().__init__(log_message)
        self.public_message = public_message


REFUSED_MESSAGE = "the request holds a value the database cannot store"


@contextlib.contextmanager
def wrapped() -> Iterator[None]:
    """Re-raise a driver's exception as the matching :class:`StoreError`; anything else (the
    store's own verdicts, cancellation, a bug) passes through unchanged."""
    try:
        yield
    except Exception as exc:
        error = store_error(exc)
        if error is None:
            raise
        raise error from None


def store_error(exc: BaseException) -> StoreError | None:
    """The :class:`StoreError` for a driver's exception; None for any other exception."""
    if isinstance(exc, StoreError):
        return None
    if isinstance(exc, sa.exc.StatementError) and not isinstance(exc, sa.exc.DBAPIError):
        return store_error(exc.orig) if exc.orig is not None else StoreError(_logged(exc))
    if isinstance(exc, sa.exc.DBAPIError):
        return _from_dbapi(exc)
    if isinstance(exc, sqlite3.Error):  # the embedded store's own driver calls (sqlite_sync)
        as_dbapi = sa.exc.DBAPIError.instance(None, None, exc, sqlite3.Error)
        if isinstance(as_dbapi, sa.exc.DBAPIError):
            return _from_dbapi(as_dbapi)
        return StoreError(_logged(exc))
    if isinstance(exc, (InvalidJson, UnicodeError, RecursionError)):  # encoding a value
        return ValueRefused(_logged(exc), REFUSED_MESSAGE)
    if isinstance(exc, (OSError, sa.exc.TimeoutError, sa.exc.DisconnectionError)):
        return StoreUnavailable(_logged(exc))
    if isinstance(exc, sa.exc.SQLAlchemyError):
        return StoreError(_logged(exc))
    return None


def _from_dbapi(exc: sa.exc.DBAPIError) -> StoreError:
    driver_error = exc.orig if exc.orig is not None else exc
    logged = _logged(driver_error)
    if exc.connection_invalidated:
        return StoreUnavailable(logged)
    sqlstate = getattr(driver_error, "sqlstate", None)
    if isinstance(sqlstate, str):  # PostgreSQL says exactly what went wrong
        if sqlstate == UNDEFINED_TABLE:
            return SchemaMissing(logged)
        if sqlstate == LOCK_NOT_AVAILABLE:
            return LockNotGranted(logged)
        if sqlstate[:2] in REFUSED_CLASSES:
            return ValueRefused(logged, REFUSED_MESSAGE)
        if sqlstate[:2] in UNAVAILABLE_CLASSES:
            return StoreUnavailable(logged)
        return StoreError(logged)
    if isinstance(exc, (sa.exc.IntegrityError, sa.exc.DataError)):
        return ValueRefused(logged, REFUSED_MESSAGE)
    if isinstance(exc, sa.exc.OperationalError) and "no such table" in str(driver_error):
        return SchemaMissing(logged)  # SQLite's way of saying it
    if isinstance(exc, sa.exc.OperationalError) and "malformed JSON" in str(driver_error):
        # a batch's value SQLite's JSON functions cannot parse: nested past their depth limit
        # (1,000 levels from SQLite 3.45, 2,000 before), which Python can encode from 3.12
        return ValueRefused(logged, REFUSED_MESSAGE)
    if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
        return StoreUnavailable(logged)
    return StoreError(logged)


def _logged(exc: BaseException) -> str:
    """The error's class and the first line of its message, bounded."""
    first_line = str(exc).strip().split("\n", 1)[0]
    if len(first_line) > MAX_LOGGED_CHARS:
        first_line = first_line[:MAX_LOGGED_CHARS] + "…"
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
