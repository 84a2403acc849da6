"""The audit of the open counts (every worker's reaper, ``timers.count_audit``), on both stores: a
count that drifted either way, or lost its row, is corrected; exact counts are left alone; and
on PostgreSQL an audit running beside accepts and endings leaves every count exact."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from tether.outcomes import completed
from tether.store.schema import invocations, open_counts
from tether.store.store import FinishRequest, OwnerLimitReached, Store

from .test_open_counts import assert_exact, drift, kept, new


async def test_an_audit_corrects_counts_too_low_too_high_and_missing(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await store.accept_many([new("ann", "acme") for _ in range(3)] + [new("bob")])
    await drift(store, "owner", "ann", 1)  # too low: would let ann past her cap
    await drift(store, "tenant", "acme", 9)  # too high
    async with store.engine.begin() as conn:  # bob's row lost; a count for no rows at all
        await conn.execute(
            sa.delete(open_counts).where(
                open_counts.c.scope == "owner", open_counts.c.name == "bob"
            )
        )
        await conn.execute(sa.insert(open_counts).values(scope="owner", name="gone", open_count=4))
    corrected = await store.audit_open_counts()
    assert corrected == [("owner", "ann"), ("owner", "bob"), ("owner", "gone"), ("tenant", "acme")]
    await assert_exact(store)
    assert "open count of owner 'ann' read 1, its open rows are 3: corrected" in caplog.text
    assert "open count of owner 'bob' read 0, its open rows are 1: corrected" in caplog.text
    assert await store.audit_open_counts() == []


async def test_an_audit_of_exact_counts_changes_nothing(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = new("ann", "acme"), new("bob", "acme")
    await store.accept_many([first, second])
    assert await store.claim(first.id, "w") is not None
    await store.finish(FinishRequest(first.id, 1, completed(None)))
    before = await kept(store)
    assert await store.audit_open_counts() == []
    assert await kept(store) == before == {("owner", "bob"): 1, ("tenant", "acme"): 1}
    assert "corrected" not in caplog.text


async def test_after_an_audit_a_count_left_too_low_no_longer_lets_the_cap_pass(
    store: Store,
) -> None:
    for _ in range(2):
        await store.accept(new("ann"), max_open_per_owner=2)
    await drift(store, "owner", "ann", 0)
    await store.accept(new("ann"), max_open_per_owner=2)  # the drifted count lets a third in
    assert await store.audit_open_counts() == [("owner", "ann")]
    with pytest.raises(OwnerLimitReached):
        await store.accept(new("ann"), max_open_per_owner=2)
    await assert_exact(store)


async def test_audits_beside_accepts_and_endings_leave_the_counts_exact(store: Store) -> None:
    """An audit reads the counts and the rows without a lock, so a busy key may look drifted;
    counted again under its count row's lock, it is written only if it truly is."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite has one writer: an audit's correction cannot overlap a write")
    other = store.sibling()
    owners = ["ann", "bob", "cat"]
    try:
        await store.accept(new("dan"))
        await drift(store, "owner", "dan", 7)  # the one true drift
        seeded = [new(owners[k % 3], "acme") for k in range(30)]
        await store.accept_many(seeded)
        for item in seeded:
            assert await store.claim(item.id, "w") is not None

        async def accepts() -> None:
            for n in range(20):
                await other.accept_many([new(owners[(n + k) % 3], "acme") for k in range(5)])

        async def endings() -> None:
            for k in range(0, len(seeded), 5):
                chunk = seeded[k : k + 5]
                await store.finish_many([FinishRequest(i.id, 1, completed(None)) for i in chunk])

        async def audits(stop: asyncio.Event) -> list[tuple[str, str]]:
            corrected: list[tuple[str, str]] = []
            while True:
                corrected += await store.audit_open_counts()
                if stop.is_set():
                    return corrected
                await asyncio.sleep(0)

        stop = asyncio.Event()
        auditing = asyncio.create_task(audits(stop))
        await asyncio.gather(accepts(), endings())
        stop.set()
        assert await auditing == [("owner", "dan")]  # once, and no busy key written
        await assert_exact(store)
    finally:
        await other.close()


async def test_an_audit_waits_for_a_write_in_flight_on_the_key_it_corrects(store: Store) -> None:
    """A key that drifted, and an accept for it still in its transaction (its row inserted, its
    count raised, neither committed): the audit takes the count row's lock before it counts, so
    it waits for that accept and counts its row; counting first would write a figure without
    it, over the accept's raise."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite has one writer: an audit cannot start beside a write")
    await store.accept(new("ann"))
    await drift(store, "owner", "ann", 5)
    in_flight = new("ann")
    async with store.engine.connect() as held:
        await held.execute(
            sa.insert(invocations).values(
                id=in_flight.id,
                owner="ann",
                tenant="ann",
                input={},
                request_hash="h",
                status="queued",
                attempt=0,
                cancel_requested=False,
                last_event_id=0,
                created_at=0.0,
                enqueued_at=0.0,
            )
        )
        await held.execute(
            sa.update(open_counts)
            .where(open_counts.c.scope.in_(["owner", "tenant"]), open_counts.c.name == "ann")
            .values(open_count=open_counts.c.open_count + 1)
        )
        audit = asyncio.create_task(store.audit_open_counts())
        await asyncio.sleep(0.5)
        assert not audit.done()  # waiting for the count row the accept holds
        await held.commit()
    assert await audit == [("owner", "ann")]
    await assert_exact(store)
    assert await kept(store) == {("owner", "ann"): 2, ("tenant", "ann"): 2}
