"""Driver errors come out of the store as its own types, with nothing of the data in them."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from tether.jsonvalue import InvalidJson
from tether.store.errors import (
    SchemaMissing,
    StoreError,
    StoreUnavailable,
    ValueRefused,
    store_error,
    wrapped,
)
from tether.store.store import Store


def dbapi(error: Exception, cls: type[sa.exc.DBAPIError] = sa.exc.DBAPIError) -> Exception:
    return cls("INSERT …", {"input": "someone's secret"}, error, hide_parameters=True)


class PgError(Exception):
    def __init__(self, sqlstate: str, text: str) -> None:
        super().__init__(text)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("driver_error", "expected"),
    [
        (
            dbapi(PgError("23502", 'null value in column "input"\nDETAIL: row (secret)')),
            ValueRefused,
        ),
        (dbapi(PgError("22P05", "unsupported Unicode escape sequence")), ValueRefused),
        (dbapi(PgError("54000", "index row size exceeds maximum")), ValueRefused),
        (dbapi(PgError("08006", "server closed the connection")), StoreUnavailable),
        (dbapi(PgError("57P01", "terminating connection")), StoreUnavailable),
        (dbapi(PgError("40P01", "deadlock detected")), StoreUnavailable),
        (dbapi(PgError("42P01", "relation does not exist")), SchemaMissing),
        (dbapi(PgError("42601", "syntax error")), StoreError),
        (
            dbapi(sqlite3.OperationalError("no such table: x"), sa.exc.OperationalError),
            SchemaMissing,
        ),
        (dbapi(sqlite3.IntegrityError("NOT NULL"), sa.exc.IntegrityError), ValueRefused),
        (dbapi(sqlite3.OperationalError("locked"), sa.exc.OperationalError), StoreUnavailable),
        (UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"), ValueRefused),
        (InvalidJson("NaN and Infinity are not valid JSON"), ValueRefused),
        (ConnectionRefusedError(111, "Connection refused"), StoreUnavailable),
        (sa.exc.TimeoutError("QueuePool limit reached"), StoreUnavailable),
    ],
)
def test_driver_errors_are_classified(driver_error: Exception, expected: type) -> None:
    error = store_error(driver_error)
    assert type(error) is expected
    assert "secret" not in str(error) and "DETAIL" not in str(error)


def test_the_stores_own_verdicts_and_bugs_pass_through_unchanged() -> None:
    assert store_error(KeyError("x")) is None
    assert store_error(StoreUnavailable("x")) is None
    with pytest.raises(KeyError), wrapped():
        raise KeyError("x")


def test_a_wrapped_error_keeps_the_driver_class_and_first_line_for_the_log_only() -> None:
    with pytest.raises(ValueRefused) as caught, wrapped():
        raise dbapi(PgError("23505", "duplicate key value\nDETAIL: Key (id)=(secret)"))
    assert str(caught.value) == "PgError: duplicate key value"
    assert caught.value.public_message == "the request holds a value the database cannot store"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


async def test_an_unreachable_database_is_unavailable(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    sqlite_store = Store.embedded(str(tmp_path / "missing" / "dir" / "t.db"))
    postgres = Store.postgres("postgresql+psycopg://postgres@127.0.0.1:9/nowhere", pool_size=1)
    for store in (sqlite_store, postgres):
        try:
            with pytest.raises(StoreUnavailable):
                await store.ping()
        finally:
            await store.close()
    await aiosqlite_threads_ended(set(threading.enumerate()) - before)


async def aiosqlite_threads_ended(started: set[threading.Thread], deadline: float = 10.0) -> None:
    """aiosqlite answers a failed connect by queueing a stop whose completion it reports to this
    test's event loop from its worker thread; if the loop closed first, that thread raises. Let
    it finish while the loop still runs."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deadline
    while any(t.is_alive() and "_connection_worker_thread" in t.name for t in started):
        assert loop.time() < give_up, "an aiosqlite worker thread did not stop"
        await asyncio.sleep(0.01)


def test_every_engine_hides_bound_parameters() -> None:
    for store in (
        Store.embedded(":memory:"),
        Store.postgres("postgresql+psycopg://postgres@127.0.0.1:9/nowhere"),
    ):
        assert store.engine.sync_engine.hide_parameters
        assert all(engine.hide_parameters for engine in store.db.statement_engines)


def test_psycopg_errors_carry_the_sqlstate_the_classifier_reads() -> None:
    assert psycopg.errors.NotNullViolation.sqlstate == "23502"
