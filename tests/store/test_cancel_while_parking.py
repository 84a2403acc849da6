"""A cancel and a park that cross: the invocation ends cancelled, never waiting with a cancel
nobody will honour."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from tests.store.rows import until_a_lock_wait
from tether.outcomes import cancelled
from tether.store.journal import CancelPending, NewWait, WaitKind
from tether.store.schema import Claim, NewInvocation, Status
from tether.store.store import Store
from tether.store.writes import FinishRequest, NewEvent

WAIT = NewWait("approve", WaitKind.INPUT, {}, None)


async def running(store: Store) -> Claim:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, {}, "h"))
    claim = await store.claim(invocation_id, "host:1")
    assert claim is not None
    return claim


async def test_an_attempt_whose_cancel_was_requested_may_not_park(store: Store) -> None:
    claim = await running(store)
    assert await store.request_cancel(claim.invocation_id) is None  # active: flagged
    with pytest.raises(CancelPending):
        await store.parks.park(claim.invocation_id, claim.attempt, [WAIT], [NewEvent("tick", {})])
    still = await store.get(claim.invocation_id)
    assert still is not None and still.status is Status.ACTIVE  # its finish says cancelled
    assert [e.type for e in await store.events_after(claim.invocation_id, 0)] == ["run.started"]
    assert await store.journal.waiting_for([claim.invocation_id]) == {}
    finished = await store.finish(FinishRequest(claim.invocation_id, claim.attempt, cancelled()))
    assert [e.type for e in finished.events] == ["run.cancelled"]


async def test_a_superseded_attempt_still_cannot_park(store: Store) -> None:
    claim = await running(store)
    assert await store.parks.park(claim.invocation_id, claim.attempt + 1, [WAIT], []) is None


async def test_a_cancel_whose_flag_misses_a_park_committing_under_it_cancels_the_waiting_run(
    pg_store: Store, migrated_pg: str
) -> None:
    """PostgreSQL: the cancel's first statement sees the row ``active`` (no match for queued or
    waiting), its flag update waits behind the park's row lock and then finds it ``waiting``."""
    store = pg_store
    claim = await running(store)
    dsn = migrated_pg.replace("postgresql+psycopg://", "postgresql://", 1)
    async with (
        await psycopg.AsyncConnection.connect(dsn) as park,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as probe,
    ):
        await park.execute(  # a park holding the row, not yet committed
            "UPDATE tether_invocations SET status = 'waiting', worker = NULL WHERE id = %s",
            [claim.invocation_id],
        )
        cancel = asyncio.create_task(store.request_cancel(claim.invocation_id))
        await until_a_lock_wait(probe, "UPDATE tether_invocations%", "the park's row lock")
        await park.commit()
        await asyncio.wait_for(cancel, 10)
    done = await store.get(claim.invocation_id)
    assert done is not None and done.status is Status.CANCELLED
