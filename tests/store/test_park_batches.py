"""Parks written together, on both stores: each attempt of a batch parks, is refused for its
cancel, or is refused as superseded, exactly as it would alone, and the refused ones write
nothing. One statement text serves every batch size."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import sqlalchemy as sa

from tests.store.executed import statements
from tether.store.errors import Superseded
from tether.store.journal import CancelPending, NewWait, WaitKind
from tether.store.parks import ParkRequest
from tether.store.schema import Claim, NewInvocation, Status, waits
from tether.store.store import Store
from tether.store.writes import NewEvent


async def running(store: Store, count: int) -> list[Claim]:
    made = [NewInvocation(str(uuid.uuid4()), "ann", None, {}, "h") for _ in range(count)]
    await store.accept_many(made)
    claims = [await store.claim(n.id, "host:1") for n in made]
    assert all(claims)
    return [c for c in claims if c is not None]


def sleep(name: str, seconds: float) -> NewWait:
    return NewWait(name, WaitKind.SLEEP, {"n": name}, seconds)


async def wait_names(store: Store, invocation_id: str) -> list[str]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(waits.c.name)
            .where(waits.c.invocation_id == invocation_id)
            .order_by(waits.c.name)
        )
        return [row.name for row in rows]


async def test_a_batch_parks_each_attempt_as_it_would_alone(store: Store) -> None:
    a, b, cancelling, superseded = await running(store, 4)
    assert await store.request_cancel(cancelling.invocation_id) is None  # active: flagged
    tick = NewEvent("tick", {"type": "tick"})
    results = await store.parks.park_many(
        [
            ParkRequest(a.invocation_id, a.attempt, [sleep("s", 60), sleep("t", 5)], [tick]),
            ParkRequest(cancelling.invocation_id, cancelling.attempt, [sleep("s", 1)], [tick]),
            ParkRequest(superseded.invocation_id, superseded.attempt + 1, [sleep("s", 1)], []),
            ParkRequest(b.invocation_id, b.attempt, [sleep("only", 1)]),
        ]
    )

    parked_a, refused_cancel, refused_superseded, parked_b = results
    assert isinstance(parked_a, list) and isinstance(parked_b, list), results
    assert [(e.cursor, e.type) for e in parked_a] == [(2, "tick"), (3, "run.waiting")]
    assert [(e.cursor, e.type) for e in parked_b] == [(2, "run.waiting")]
    assert [w["wait"] for w in parked_a[-1].data["waiting_for"]] == ["s", "t"]
    assert isinstance(refused_cancel, CancelPending)
    assert isinstance(refused_superseded, Superseded)
    for claim, status, names, logged in [
        (a, Status.WAITING, ["s", "t"], ["run.started", "tick", "run.waiting"]),
        (b, Status.WAITING, ["only"], ["run.started", "run.waiting"]),
        (cancelling, Status.ACTIVE, [], ["run.started"]),
        (superseded, Status.ACTIVE, [], ["run.started"]),
    ]:
        row = await store.get(claim.invocation_id)
        assert row is not None and row.status is status, (claim, row)
        assert await wait_names(store, claim.invocation_id) == names
        assert [e.type for e in await store.events_after(claim.invocation_id, 0)] == logged
    found = (await store.journal.waiting_for([a.invocation_id]))[a.invocation_id]
    wake = {w.name: w.wake_at for w in found}
    assert (
        wake["s"] is not None and wake["t"] is not None and abs(wake["s"] - wake["t"] - 55) < 1e-3
    )


async def test_parks_of_any_batch_size_are_one_statement_text(store: Store) -> None:
    claims = await running(store, 1 + 3)
    with statements(store) as seen:
        for batch in (claims[:1], claims[1:]):
            results = await store.parks.park_many(
                [ParkRequest(c.invocation_id, c.attempt, [sleep("s", 1)]) for c in batch]
            )
            assert all(isinstance(r, list) for r in results), results
    parks = [e.cached for e in seen if e.text.lstrip().startswith("WITH counts AS")]
    assert parks == [parks[0], True], seen  # the second batch reused the first's text
    for claim in claims:
        row = await store.get(claim.invocation_id)
        assert row is not None and row.status is Status.WAITING


async def test_a_park_whose_row_another_transaction_holds_waits_alone(
    pg_store: Store, migrated_pg: str
) -> None:
    """PostgreSQL: the grouped park skips a row locked elsewhere (it never waits for a lock
    while holding others), parks the rest at once, then parks the held one alone."""
    store = pg_store
    free, held = await running(store, 2)
    dsn = migrated_pg.replace("postgresql+psycopg://", "postgresql://", 1)
    async with await psycopg.AsyncConnection.connect(dsn) as other:
        await other.execute(
            "SELECT 1 FROM tether_invocations WHERE id = %s FOR UPDATE", [held.invocation_id]
        )
        parking = asyncio.create_task(
            store.parks.park_many(
                [ParkRequest(c.invocation_id, c.attempt, [sleep("s", 1)]) for c in (free, held)]
            )
        )
        for _ in range(400):
            row = await store.get(free.invocation_id)
            if row is not None and row.status is Status.WAITING:
                break
            await asyncio.sleep(0.025)
        else:
            raise TimeoutError("the free row never parked")
        assert not parking.done()  # the held one waits for its lock, alone
        await other.commit()
        results = await asyncio.wait_for(parking, 10)
    assert all(isinstance(r, list) for r in results), results
    row = await store.get(held.invocation_id)
    assert row is not None and row.status is Status.WAITING
