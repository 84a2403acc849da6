"""Shared fixtures: real services (skipped clearly when absent, required under CI) and servers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Cluster, start_dev
from tests.services import PG_ADMIN_URL, REDIS_URL, create_database, drop_database, require

ADMIN = "admin@example.com"
TENANT_HEADER = "X-Forwarded-Tenant"
CONTRACT_ENV = {
    "TETHER_TIMERS__SYNC_TIMEOUT": "2",
    "TETHER_TIMERS__INLINE_SLEEP_MAX": "0.2",
    "TETHER_AUTH__ADMINS": ADMIN,
    "TETHER_AUTH__TENANT_HEADER": TENANT_HEADER,
}
"""The servers of the contract suite: sync POSTs give up quickly; ctx.sleep parks past 0.2 s;
one admin; the proxy (the tests, from loopback) may name a caller's tenant."""


def new_database() -> Iterator[str]:
    """A new PostgreSQL database (SQLAlchemy URL), not migrated, dropped afterwards."""
    require(PG_ADMIN_URL, 5432, "PostgreSQL")
    url = create_database()
    yield url
    drop_database(url)


pg_database = pytest.fixture(new_database, scope="session", name="pg_database")
"""A fresh database for this test session, not yet migrated."""
fresh_database = pytest.fixture(new_database, name="fresh_database")
"""A fresh database for one test, not migrated."""


@pytest.fixture(scope="session")
def redis_url() -> str:
    require(REDIS_URL, 6379, "Redis")
    return REDIS_URL


@pytest.fixture(scope="session")
def migrated_pg(pg_database: str) -> str:
    import asyncio
    import concurrent.futures

    from tether.store.store import Store

    async def run() -> None:
        store = Store.postgres(pg_database, pool_size=1)
        await store.migrate()
        await store.close()

    # may be first requested from inside a running loop: migrate on a thread of its own
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()
    return pg_database


@pytest.fixture(scope="session")
def cluster(
    migrated_pg: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, str]]:
    """One gateway and two worker processes on PostgreSQL and Redis, shared by the session."""
    c = Cluster(
        migrated_pg,
        redis_url,
        tmp_path_factory.mktemp("cluster"),
        env_overrides=CONTRACT_ENV,
    )
    try:
        _, base = c.start_gateway()
        c.start_worker(processes=2)
        yield c, base
    finally:
        c.stop()


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, base = start_dev(
        tmp_path_factory.mktemp("dev"),
        "tests.apps.contract:app",
        CONTRACT_ENV,
    )
    try:
        yield base
    finally:
        proc.stop()


@pytest.fixture(params=["embedded", "distributed"])
def server(request: pytest.FixtureRequest) -> str:
    """The base URL of a Tether server: `tether dev`, or gateway + 2 workers."""
    if request.param == "embedded":
        return str(request.getfixturevalue("dev_server"))
    _, base = request.getfixturevalue("cluster")
    return str(base)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


def pytest_report_header(config: pytest.Config) -> str:
    return (
        f"tether tests: CI={'yes' if os.environ.get('CI') else 'no'} (services required under CI)"
    )
