"""The batched reads (invocations by id, streams' pages) on both stores: the reads are a bound
batch, one statement text for any number of them, compiled once; and on PostgreSQL a read is
its one statement, in autocommit, with no transaction around it."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from psycopg.pq import TransactionStatus

from tests.store.executed import Executed, statements
from tether.store.schema import NewInvocation
from tether.store.store import AppendRequest, NewEvent, Store, StreamRead


async def started(store: Store, count: int, ticks: int = 3) -> list[str]:
    made = [NewInvocation(str(uuid.uuid4()), "ann", None, {}, "h") for _ in range(count)]
    await store.accept_many(made)
    for n in made:
        claim = await store.claim(n.id, "w")
        assert claim is not None
        events = [NewEvent("tick", {"i": i}) for i in range(ticks)]
        await store.append(AppendRequest(n.id, claim.attempt, events))
    return [n.id for n in made]


def reads_of(seen: list[Executed], cte: str) -> list[bool]:
    return [e.cached for e in seen if e.text.lstrip().startswith(f"WITH {cte} AS")]


async def test_reads_by_id_are_one_statement_for_any_count(store: Store) -> None:
    ids = await started(store, 5)
    missing = str(uuid.uuid4())
    with statements(store) as seen:
        for asked in ([ids[0]], ids[1:4], [ids[4], missing, ids[0], ids[4]], ids):
            got = await store.get_many(asked)
            assert [g.id if g else None for g in got] == [
                None if i == missing else i for i in asked
            ]
    reads = reads_of(seen, "wanted_ids")
    assert len(reads) == 4 and reads[1:] == [True, True, True], seen  # compiled once
    assert len({e.text for e in seen}) == 1


async def test_stream_reads_are_one_statement_for_any_count(store: Store) -> None:
    ids = await started(store, 4, ticks=5)
    with statements(store) as seen:
        one = await store.read_streams([StreamRead(ids[0], 1, 2)])
        many = await store.read_streams(
            [StreamRead(i, after, 3) for i in ids for after in (0, 2)]
            + [StreamRead(str(uuid.uuid4()), 0, 10)]
        )
    page = one[0]
    assert page is not None and [e.cursor for e in page.events] == [2, 3]
    assert many[-1] is None
    for n in range(len(ids)):
        low, high = many[2 * n], many[2 * n + 1]
        assert low is not None and high is not None
        assert [e.cursor for e in low.events] == [1, 2, 3]
        assert [e.cursor for e in high.events] == [3, 4, 5]
        assert low.owner == "ann" and low.last_event_id == 6  # run.started and 5 ticks
    reads = reads_of(seen, "wanted")
    assert len(reads) == 2 and reads[1] is True, seen


async def test_a_postgresql_read_opens_no_transaction(store: Store) -> None:
    if store.db.dialect.name != "postgresql":
        pytest.skip("the embedded store's reads are WAL snapshots of their own")
    async with store.db.connection() as conn:
        assert await conn.scalar(sa.text("SELECT 1")) == 1
        raw = await conn.get_raw_connection()  # type: ignore[attr-defined]
        # in a transaction psycopg would have sent BEGIN, and the pool a ROLLBACK after
        assert raw.driver_connection.info.transaction_status is TransactionStatus.IDLE
    async with store.db.transaction() as conn:
        await conn.execute(sa.text("SELECT 1"))
        raw = await conn.get_raw_connection()  # type: ignore[attr-defined]
        assert raw.driver_connection.info.transaction_status is TransactionStatus.INTRANS


async def test_an_id_no_column_could_hold_finds_nothing_and_fails_no_other_read(
    store: Store,
) -> None:
    [invocation_id] = await started(store, 1)
    bad = ["nul\x00id", "lone\ud800surrogate"]
    got = await store.get_many([invocation_id, *bad, invocation_id])
    assert [g.id if g else None for g in got] == [invocation_id, None, None, invocation_id]
    pages = await store.read_streams([StreamRead(i, 0, 10) for i in [*bad, invocation_id]])
    assert pages[:2] == [None, None]
    assert pages[2] is not None and len(pages[2].events) == 4  # run.started and 3 ticks
    assert await store.read_streams([StreamRead(bad[0], 0, 10)]) == [None]


async def test_a_read_after_the_last_cursor_a_bigint_holds_is_an_empty_page(store: Store) -> None:
    [invocation_id] = await started(store, 1)
    last = 2**63 - 1  # the largest cursor the API takes; after + limit would overflow
    pages = await store.read_streams(
        [StreamRead(invocation_id, last, 1000), StreamRead(invocation_id, 1, 2)]
    )
    assert pages[0] is not None and pages[0].events == [] and pages[0].owner == "ann"
    assert pages[1] is not None and [e.cursor for e in pages[1].events] == [2, 3]


async def test_a_store_without_separate_reads_reads_in_a_transaction_on_the_writers_pool(
    migrated_pg: str,
) -> None:
    store = Store.postgres(migrated_pg, pool_size=1, separate_reads=False)  # as a worker's
    try:
        assert store.db.reader is None
        async with store.db.connection() as conn:
            assert await conn.scalar(sa.text("SELECT 1")) == 1
            raw = await conn.get_raw_connection()  # type: ignore[attr-defined]
            assert raw.driver_connection.info.transaction_status is TransactionStatus.INTRANS
    finally:
        await store.close()
