"""Retention on both stores: expired invocations go oldest first, in transactions bounded by
their events as well as by their number; one with more events than a transaction deletes goes
over several, its row last."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import sqlalchemy as sa

from tests.store.test_store_contract import age
from tether.outcomes import completed
from tether.store.maintenance import Expired
from tether.store.schema import NewInvocation
from tether.store.store import AppendRequest, FinishRequest, NewEvent, Store


async def finished(store: Store, events: int, hours_ago: float) -> str:
    """A completed invocation with ``events`` events of its own after its ``run.started``."""
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", None, 1, "h"))
    await store.claim(invocation_id, "w")
    if events:
        ticks = [NewEvent("tick", {"i": i}) for i in range(events)]
        await store.append(AppendRequest(invocation_id, 1, ticks))
    await store.finish(FinishRequest(invocation_id, 1, completed(1)))
    await age(store, invocation_id, "finished_at", hours_ago * 3600)
    return invocation_id


async def stored_events(store: Store, invocation_id: str) -> list[int]:
    return [e.cursor for e in await store.events_after(invocation_id, 0)]


async def test_invocations_go_whole_oldest_first_while_their_events_fit(store: Store) -> None:
    # each has 1 + 3 + 1 = 5 events: run.started, three ticks, run.completed
    newest, oldest, middle = [await finished(store, 3, h) for h in (2, 4, 3)]
    kept = await finished(store, 3, 0)

    first = await store.delete_expired(600, limit=10, max_events=12)
    assert (first.invocations, first.events, first.more) == (2, 10, True)
    assert await store.get(oldest) is None and await store.get(middle) is None
    assert await store.get(newest) is not None

    second = await store.delete_expired(600, limit=10, max_events=12)
    assert (second.invocations, second.events, second.more) == (1, 5, False)
    assert await store.get(newest) is None and await stored_events(store, newest) == []
    assert await store.get(kept) is not None and len(await stored_events(store, kept)) == 5


async def test_a_full_batch_says_more_may_have_expired(store: Store) -> None:
    for h in (2, 3):
        await finished(store, 0, h)
    done = await store.delete_expired(600, limit=2)
    assert (done.invocations, done.more) == (2, True)
    assert await store.delete_expired(600, limit=2) == Expired(0, 0, more=False)


async def test_an_invocation_with_more_events_than_a_batch_goes_over_several(
    store: Store,
) -> None:
    big = await finished(store, 9, 5)  # 11 events
    after = await finished(store, 1, 4)  # 3 events, expired later

    one = await store.delete_expired(600, limit=10, max_events=4)
    assert (one.invocations, one.events, one.more) == (0, 4, True)
    assert await store.get(big) is not None  # still there, its oldest four events gone
    assert await stored_events(store, big) == list(range(5, 12))

    two = await store.delete_expired(600, limit=10, max_events=4)
    assert (two.invocations, two.events) == (0, 4)
    assert await stored_events(store, big) == [9, 10, 11]

    three = await store.delete_expired(600, limit=10, max_events=4)
    assert (three.invocations, three.events, three.more) == (1, 3, True)
    assert await store.get(big) is None and await stored_events(store, big) == []
    assert await store.get(after) is not None  # its turn comes next

    four = await store.delete_expired(600, limit=10, max_events=4)
    assert (four.invocations, four.events, four.more) == (1, 3, False)
    assert await store.get(after) is None


async def test_reapers_at_once_take_different_invocations(store: Store) -> None:
    """On PostgreSQL a reaper passes over the expired rows another's transaction holds (the
    embedded store has one writer: nothing is held while a transaction waits for it): the next
    ones are its, even when the held one is an invocation going over several transactions."""
    if store.dialect != "postgresql":
        pytest.skip("one writer: retention transactions take turns")
    big = await finished(store, 10, 4)  # 12 events: more than one transaction of 4
    small, newest = await finished(store, 0, 3), await finished(store, 0, 2)
    lock = sa.text("SELECT 1 FROM tether_invocations WHERE id = :id FOR UPDATE")
    async with store.engine.begin() as conn:
        await conn.execute(lock, {"id": big})
        for gone in (small, newest):  # one at a time: the oldest alone would fill one
            done = await asyncio.wait_for(store.delete_expired(600, max_events=4), timeout=10)
            assert (done.invocations, done.events, done.more) == (1, 2, True)
            assert await store.get(gone) is None
        everything_held = await asyncio.wait_for(store.delete_expired(600), timeout=10)
        assert everything_held == Expired(0, 0, more=False)  # no spinning on another's rows
    assert len(await stored_events(store, big)) == 12
    assert (await store.delete_expired(600, max_events=4)).events == 4


async def test_the_transaction_that_deletes_the_last_events_deletes_the_invocation(
    store: Store,
) -> None:
    exact = await finished(store, 6, 5)  # 8 events: two transactions of four
    first = await store.delete_expired(600, max_events=4)
    assert (first.invocations, first.events, first.more) == (0, 4, True)
    second = await store.delete_expired(600, max_events=4)
    assert (second.invocations, second.events, second.more) == (1, 4, False)
    assert await store.get(exact) is None
