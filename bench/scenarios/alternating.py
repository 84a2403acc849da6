"""What the in-process claim scenarios share (``newcomers``, ``lending``): a store of one
connection on a private PostgreSQL database, many tenants with queued work, and rounds that
alternate between the code's way and the baseline's, each way warmed first."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from bench.procs import private_database
from tether.outcomes import completed
from tether.store.schema import Claim, NewInvocation
from tether.store.store import FinishRequest, Store

QUEUED_EACH = 64
"""Queued invocations per tenant: more than the rounds take from any of them."""
WARM_ROUNDS = 8
"""Rounds per way before the measured ones: statements compiled, planned, prepared."""


@dataclass
class Way:
    ours: bool
    """The code's way; else the baseline's."""
    cpu: list[float] = field(default_factory=list)
    """This process's CPU seconds per round (or per what a round started)."""
    wall: list[float] = field(default_factory=list)


@asynccontextmanager
async def queued_store(tenants: list[str]) -> AsyncIterator[Store]:
    """The store, with :data:`QUEUED_EACH` invocations queued for each of ``tenants``."""
    with private_database() as db:
        store = Store.postgres(db.sqlalchemy_url, pool_size=1, separate_reads=False)
        try:
            await store.accept_many(
                [
                    NewInvocation(str(uuid.uuid4()), t, None, {}, "h", tenant=t)
                    for t in tenants
                    for _ in range(QUEUED_EACH)
                ]
            )
            yield store
        finally:
            await store.close()


async def alternate(play: Callable[[Way], Awaitable[None]], rounds: int) -> tuple[Way, Way]:
    """``rounds`` of each way, alternating, after :data:`WARM_ROUNDS` of each unmeasured:
    (ours, the baseline)."""
    ways = (Way(ours=True), Way(ours=False))
    for way in ways:
        for _ in range(WARM_ROUNDS):
            await play(way)
        way.cpu.clear()
        way.wall.clear()
    for _ in range(rounds):
        for way in ways:
            await play(way)
    return ways


async def finish(store: Store, claims: list[Claim]) -> None:
    """End what a round started: its tenants run nothing again."""
    await store.finish_many(
        [FinishRequest(c.invocation_id, c.attempt, completed(None)) for c in claims]
    )
