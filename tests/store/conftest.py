"""The store contract runs against the embedded SQLite store and real PostgreSQL alike."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import nullcontext
from pathlib import Path

import pytest
import sqlalchemy as sa

from tether.store.bound import Carriage
from tether.store.dialect import sqlite_before_arrows
from tether.store.store import Store


@pytest.fixture(scope="session")
def migrated_pg() -> Iterator[str]:
    """A database of the store tests' own. Workers claim whatever is queued in their database
    (a message is only a token), so the session's shared cluster, on the shared database, would
    claim these tests' invocations from under them."""
    from tests.services import private_migrated_database

    with private_migrated_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Each store; tests of JSON values also name ``sqlite-text``: SQLite's batches as on a
    SQLite older than 3.38 (no ``->``: a JSON value travels as a string holding its text)."""
    if request.param in ("sqlite", "sqlite-text"):
        with sqlite_before_arrows() if request.param == "sqlite-text" else nullcontext():
            s = Store.embedded(str(tmp_path / "store.db"))
        if request.param == "sqlite-text":
            assert s.db.dialect.carriage is Carriage.SQLITE_TEXT
        await s.migrate()
    else:
        s = await emptied_postgres(request.getfixturevalue("migrated_pg"))
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def pg_store(migrated_pg: str) -> AsyncIterator[Store]:
    """The PostgreSQL store alone, for what only PostgreSQL does (row locks held elsewhere)."""
    s = await emptied_postgres(migrated_pg)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def pg(migrated_pg: str) -> AsyncIterator[Store]:
    """A PostgreSQL store of two pooled connections, its tables as other tests left them."""
    store = Store.postgres(migrated_pg, pool_size=2)
    try:
        yield store
    finally:
        await store.close()


async def emptied_postgres(url: str) -> Store:
    s = Store.postgres(url, pool_size=5)
    async with s.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "TRUNCATE tether_invocations, tether_events, tether_steps, tether_waits, "
                "tether_tenants, tether_global_limits, tether_tenant_buckets, "
                "tether_tenant_usage, tether_tenant_passes, tether_claim_clock, "
                "tether_open_counts, tether_threads, tether_thread_messages"
            )
        )
    return s
