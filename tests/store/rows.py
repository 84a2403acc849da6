"""Invocations the store contract tests start from."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tether.store.schema import NewInvocation
from tether.store.store import Store


def new(
    owner: str = "ann", session: str | None = None, input: Any = 1, h: str = "h"
) -> NewInvocation:
    return NewInvocation(str(uuid.uuid4()), owner, session, input, h)


async def claimed(store: Store, count: int) -> list[str]:
    """``count`` new invocations of owner ``ann``, each accepted and claimed by worker ``w``."""
    made = [new() for _ in range(count)]
    for n in made:
        await store.accept(n)
        assert await store.claim(n.id, "w") is not None
    return [n.id for n in made]


async def until_a_lock_wait(probe: Any, query_like: str = "%", what: str = "a lock") -> None:
    """Until another backend of this database waits for a row lock (running a statement like
    ``query_like``); ``probe`` is a psycopg connection in autocommit mode."""
    for _ in range(400):
        blocked = await probe.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND query LIKE %s",
            [query_like],
        )
        if await blocked.fetchone() is not None:
            return
        await asyncio.sleep(0.025)
    raise TimeoutError(f"nothing waited for {what}")
