"""Invocations the store contract tests start from."""

from __future__ import annotations

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
