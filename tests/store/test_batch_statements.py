"""The batch statements (an attempt's events counted and stored, a batch of attempts ended), on
both stores: one text for every batch size (one JSON parameter, taken apart by the database),
compiled once and reused from SQLAlchemy's cache, and right for a batch of any size, every value
reaching its row as given. The heartbeat, a batch the other way: split into chunks, none
missed."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tests.store.executed import Executed, statements
from tether.outcomes import completed
from tether.store.attempts import COUNTS, HEARTBEAT_CHUNK, advance_statement
from tether.store.bound import Carriage
from tether.store.endings import Ending, write_endings
from tether.store.schema import NewInvocation, Status, invocations
from tether.store.store import AppendRequest, Finished, FinishRequest, NewEvent, Store


async def claimed(store: Store, count: int) -> list[str]:
    made = [NewInvocation(str(uuid.uuid4()), "ann", None, {}, "h") for _ in range(count)]
    await store.accept_many(made)
    for n in made:
        assert await store.claim(n.id, "w") is not None
    return [n.id for n in made]


def batch_updates(seen: list[Executed], name: str) -> list[bool]:
    return [e.cached for e in seen if e.text.lstrip().startswith(f"WITH {name} AS")]


async def test_the_batch_statements_are_compiled_once(store: Store) -> None:
    ids = await claimed(store, 6)
    tick = NewEvent("tick", {"type": "tick"})
    with statements(store) as seen:
        for pair in (ids[0:2], ids[2:4], ids[4:6]):  # three batches of one size
            await store.append_many([AppendRequest(i, 1, [tick]) for i in pair])
            results = await store.finish_many([FinishRequest(i, 1, completed(i)) for i in pair])
            assert all(isinstance(r, Finished) for r in results), results
    counts, ends = batch_updates(seen, "counts"), batch_updates(seen, "ends")
    assert len(counts) == 3 and len(ends) == 3, seen
    assert counts[1:] == [True, True] and ends[1:] == [True, True]  # the text compiled once
    for invocation_id in ids:
        done = await store.get(invocation_id)
        assert done is not None and done.status is Status.COMPLETED and done.output == invocation_id
        assert [e.type for e in await store.events_after(invocation_id, 0)][-2:] == [
            "tick",
            "run.completed",
        ]


async def test_a_large_batch_is_written_whole(store: Store) -> None:
    count = 300  # over the 256 terms a compound SELECT of SQLite's rows once held
    ids = await claimed(store, count)
    tick = NewEvent("tick", {"type": "tick"})
    appended = await store.append_many([AppendRequest(i, 1, [tick]) for i in ids])
    assert [[e.cursor for e in events] for events in appended] == [[2]] * count  # type: ignore[union-attr]
    results = await store.finish_many(
        [FinishRequest(i, 1, completed(n)) for n, i in enumerate(ids)]
    )
    assert all(isinstance(r, Finished) for r in results)
    for n, invocation_id in enumerate(ids):
        done = await store.get(invocation_id)
        assert done is not None and done.status is Status.COMPLETED and done.output == n


async def test_a_batch_of_any_size_is_one_text(store: Store) -> None:
    """A text per size would be compiled per size, and on PostgreSQL planned again on every
    execution until prepared (a ``UNION ALL`` of 128 one-row ``SELECT``s: ~28 ms)."""
    ids = await claimed(store, 1 + 3 + 40)
    tick = NewEvent("tick", {"type": "tick"})
    outputs = [None, {"nested": [1, "two"]}, "text", 3]
    with statements(store) as seen:
        for batch in (ids[:1], ids[1:4], ids[4:]):
            await store.append_many([AppendRequest(i, 1, [tick]) for i in batch])
            finishes = [FinishRequest(i, 1, completed(outputs[ids.index(i) % 4])) for i in batch]
            assert all(isinstance(r, Finished) for r in await store.finish_many(finishes))
    for start in ("WITH counts AS", "WITH ends AS", "WITH event_rows AS"):
        texts = {e.text for e in seen if e.text.lstrip().startswith(start)}
        assert len(texts) == 1, texts
    for n, invocation_id in enumerate(ids):
        done = await store.get(invocation_id)
        assert done is not None and done.status is Status.COMPLETED
        assert done.output == outputs[n % 4] and done.last_event_id == 3


async def test_a_batch_of_endings_of_every_kind_reaches_its_rows_as_given(store: Store) -> None:
    """Ints and floats in one column, fences set and absent, JSON of every kind and awkward
    text: each value reaches its row as it was (on PostgreSQL taken out as text and cast)."""
    ids = await claimed(store, 8)
    outputs = [{"a": None}, [None, True], False, "NULL", 'a"b\\c,{} ', "", None, 0.5]
    stale = [30, 2.5, None, None, None, None, None, None]
    async with store.db.transaction() as conn:  # the first two have not beaten for long
        await conn.execute(
            sa.update(invocations).where(invocations.c.id.in_(ids[:2])).values(heartbeat_at=0.0)
        )
    endings = [
        Ending(i, completed(outputs[n]), attempt=None if n % 2 else 1, stale_after=stale[n])
        for n, i in enumerate(ids)
    ]
    async with store.db.transaction() as conn:
        results = await write_endings(conn, store.db.dialect, endings)
    assert all(isinstance(r, Finished) for r in results), results
    for n, invocation_id in enumerate(ids):
        done = await store.get(invocation_id)
        assert done is not None and done.status is Status.COMPLETED
        assert done.output == outputs[n]


async def test_a_batch_of_events_reaches_the_log_as_given(store: Store) -> None:
    """JSON ``null``, text that looks like SQL or JSON, escapes and characters outside ASCII,
    as event data of several attempts in one batch."""
    ids = await claimed(store, 3)
    datas: list[Any] = [
        None,
        "NULL",
        'a"b\\c,{} ',
        "",
        {"k": [1, 2.5, None, True]},
        "é ✓ 😀",
        0,
        [],
    ]
    requests = [
        AppendRequest(i, 1, [NewEvent("note", data) for data in datas[n::3]])
        for n, i in enumerate(ids)
    ]
    assert all(isinstance(r, list) for r in await store.append_many(requests))
    for n, invocation_id in enumerate(ids):
        logged = await store.events_after(invocation_id, 1)  # after run.started
        assert [(e.type, e.data) for e in logged] == [("note", d) for d in datas[n::3]]


async def test_a_batch_past_sqlites_length_limit_is_written_item_by_item(tmp_path: Path) -> None:
    """On SQLite a batch is one parameter, held to SQLite's limit on a string's length (1 GB
    by default, lowered here): past it the database refuses the batch, and the group commit
    writes its items one at a time, each under the limit."""
    store = Store.embedded(str(tmp_path / "limit.db"))
    assert store.db.sync is not None

    def limited(dbapi: sqlite3.Connection, _: object) -> None:
        dbapi.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 5_000)

    sa.event.listen(store.db.sync.writer.engine, "connect", limited)
    await store.migrate()
    try:
        ids = await claimed(store, 3)
        big = "x" * 3_000
        appended = await store.append_many(
            [AppendRequest(i, 1, [NewEvent("note", big)]) for i in ids]
        )
        assert all(isinstance(r, list) for r in appended), appended
        for invocation_id in ids:
            [note] = await store.events_after(invocation_id, 1)
            assert note.data == big
    finally:
        await store.close()


async def test_a_heartbeat_beats_every_attempt_a_chunk_at_a_time(store: Store) -> None:
    """Rows an update wrote stay locked until its transaction ends: the beat takes them
    ``HEARTBEAT_CHUNK`` at a time, and still reports every live attempt and only those."""
    ids = await claimed(store, 2 * HEARTBEAT_CHUNK + 2)
    superseded = ids.pop()
    assert await store.request_cancel(ids[-1]) is None  # active: flagged, reported by the beat
    with statements(store) as seen:
        alive = await store.heartbeat([(i, 1) for i in ids] + [(superseded, 7)])
    assert alive == {i: i == ids[-1] for i in ids}
    beats = [e for e in seen if e.text.lstrip().upper().startswith("UPDATE")]
    assert len(beats) == 3, seen


async def test_a_small_batch_probes_its_rows_by_key_among_many_active(migrated_pg: str) -> None:
    """PostgreSQL estimates a set-returning function at 100 rows whatever it returns: at that
    estimate it joined a batch of five to every active invocation by hash (1-7 ms at 4,000
    active) instead of probing the key five times. The batch's row count, as a ``LIMIT`` that
    keeps every row, gives the planner the true size."""
    store = Store.postgres(migrated_pg, pool_size=1)
    try:
        async with store.engine.begin() as conn:
            await conn.execute(sa.text("TRUNCATE tether_invocations, tether_events"))
            await conn.exec_driver_sql(
                "INSERT INTO tether_invocations (id, owner, input, request_hash, status, "
                "attempt, cancel_requested, last_event_id, user_auth, tenant, priority, "
                "created_at, enqueued_at, worker, heartbeat_at) SELECT md5(g::text), 'o', "
                "'{}'::jsonb, 'h', CASE WHEN g <= 4000 THEN 'active' ELSE 'completed' END, 1, "
                "false, 1, false, 'o', 0, 0, 0, 'w', 1 FROM generate_series(1, 20000) g"
            )
        async with store.engine.connect() as conn:
            await conn.exec_driver_sql("ANALYZE tether_invocations")
            ids = [(await conn.scalar(sa.text(f"SELECT md5('{g}')"))) for g in range(5)]
            text = advance_statement(Carriage.JSONB).compile(dialect=conn.dialect)
            params = COUNTS.params([(i, 1, 0) for i in ids], carriage=Carriage.JSONB)
            explained = await conn.exec_driver_sql(f"EXPLAIN {text}", params)
            plan = "\n".join(row[0] for row in explained)
        assert "tether_invocations_pkey" in plan and "Hash Join" not in plan, plan
    finally:
        async with store.engine.begin() as conn:
            await conn.execute(sa.text("TRUNCATE tether_invocations, tether_events"))
        await store.close()
