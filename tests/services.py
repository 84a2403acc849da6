"""Real PostgreSQL and Redis for the tests: found, or skipped with a reason (failed under CI)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

PG_ADMIN_URL = os.environ.get("TETHER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("TETHER_TEST_REDIS", "redis://127.0.0.1:6379/0")


def reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or default_port), 1
        ):
            return True
    except OSError:
        return False


def require(url: str, default_port: int, what: str) -> None:
    if reachable(url, default_port):
        return
    message = f"{what} is not reachable at {url}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set: services are required)")
    pytest.skip(f"{message}: skipping tests that need it")


def create_database() -> str:
    """A fresh, migrated PostgreSQL database; returns its SQLAlchemy URL."""
    import psycopg

    name = f"tether_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    return f"{base}/{name}".replace("postgresql://", "postgresql+psycopg://", 1)


def drop_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def private_migrated_database() -> Iterator[str]:
    """A migrated PostgreSQL database of the caller's own, dropped afterwards: for tests whose
    rows the session's shared workers must not see (they claim whatever is queued and reap
    whatever is stale in their database) or whose scans must not see those workers."""
    require(PG_ADMIN_URL, 5432, "PostgreSQL")
    url = create_database()
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # clear of any running loop
            pool.submit(asyncio.run, _migrate(url)).result()
        yield url
    finally:
        drop_database(url)


async def _migrate(url: str) -> None:
    from tether.store.store import Store

    store = Store.postgres(url, pool_size=1)
    try:
        await store.migrate()
    finally:
        await store.close()
