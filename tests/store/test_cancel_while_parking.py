"""A cancel and a park that cross: the invocation ends cancelled, never waiting with a cancel
nobody will honour."""

from __future__ import annotations

import uuid

import pytest

from tether.outcomes import cancelled
from tether.store.journal import CancelPending, NewWait, WaitKind
from tether.store.schema import Claim, NewInvocation, Status
from tether.store.store import Store

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
        await store.journal.park(claim.invocation_id, claim.attempt, [WAIT], [("tick", {})])
    still = await store.get(claim.invocation_id)
    assert still is not None and still.status is Status.ACTIVE  # its finish says cancelled
    assert [e.type for e in await store.events_after(claim.invocation_id, 0)] == ["run.started"]
    assert await store.journal.waiting_for([claim.invocation_id]) == {}
    finished = await store.finish(claim.invocation_id, claim.attempt, cancelled())
    assert [e.type for e in finished.events] == ["run.cancelled"]


async def test_a_superseded_attempt_still_cannot_park(store: Store) -> None:
    claim = await running(store)
    assert await store.journal.park(claim.invocation_id, claim.attempt + 1, [WAIT], []) is None
