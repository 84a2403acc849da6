"""A pooled PostgreSQL connection that sat idle is pinged at checkout, and one the server
dropped meanwhile is replaced without the caller seeing an error; a connection just used is
handed out without a ping."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tether.store.engine import create_engine
from tether.store.idleping import ping_when_idle


@pytest.fixture
async def engine(migrated_pg: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(migrated_pg, pool_size=1)
    try:
        yield engine
    finally:
        await engine.dispose()


def count_pings(engine: AsyncEngine) -> list[int]:
    pings = [0]
    dialect: Any = engine.sync_engine.dialect
    original = dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        pings[0] += 1
        return bool(original(dbapi_connection))

    dialect.do_ping = counted
    return pings


async def backend_pid(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(sa.text("SELECT pg_backend_pid()")))


async def test_a_connection_in_use_is_not_pinged_and_an_idle_one_is(engine: AsyncEngine) -> None:
    pings = count_pings(engine)
    first = await backend_pid(engine)
    assert await backend_pid(engine) == first and pings[0] == 0
    ping_when_idle(engine, idle_after=0.0)  # every connection counts as idle from here on
    assert await backend_pid(engine) == first and pings[0] == 1


async def test_an_idle_connection_the_server_dropped_is_replaced_unseen(
    engine: AsyncEngine, migrated_pg: str
) -> None:
    dropped = await backend_pid(engine)
    other = create_engine(migrated_pg, pool_size=1)
    try:
        async with other.connect() as conn:
            await conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": dropped})
    finally:
        await other.dispose()
    ping_when_idle(engine, idle_after=0.0)
    replaced = await backend_pid(engine)  # no error: the ping failed, the pool reconnected
    assert replaced != dropped
