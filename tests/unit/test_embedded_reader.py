"""The embedded store reads on connections of their own: a read does not wait behind the one
writer's transaction, and those connections cannot write."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import sqlalchemy as sa

from tether.store.schema import NewInvocation
from tether.store.store import Store


async def test_a_read_does_not_wait_for_the_writers_transaction(store: Store) -> None:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, {"x": 1}, "h"))
    async with store.db.transaction():  # holds the one write connection and the write lock
        found = await asyncio.wait_for(store.get(invocation_id), 5)
    assert found is not None and found.id == invocation_id


async def test_a_commit_is_seen_by_the_next_read(store: Store) -> None:
    ids = [str(uuid.uuid4()) for _ in range(20)]
    for invocation_id in ids:
        await store.accept(NewInvocation(invocation_id, "ann", None, {}, "h"))
        assert await store.get(invocation_id) is not None


async def test_the_read_connections_write_nothing(store: Store) -> None:
    assert store.db.reader is not None
    async with store.db.reader.connect() as conn:
        with pytest.raises(sa.exc.OperationalError, match="readonly"):
            await conn.execute(sa.text("DELETE FROM tether_invocations"))
