"""PostgreSQL statements on psycopg directly (:mod:`tether.store.pg_direct`): the same rows, row
counts and errors as SQLAlchemy's own path, and SQLAlchemy's path wherever the direct one would
not send the same statement or someone listens to the statements."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa

from tether.store import pg_direct
from tether.store.bound import BoundBatch
from tether.store.errors import StoreUnavailable, ValueRefused
from tether.store.schema import NewInvocation, events, invocations, thread_messages, threads
from tether.store.store import AppendRequest, NewEvent, Store

BATCH = BoundBatch("some_ids", (sa.column("id", sa.Text),))
BY_IDS = sa.select(invocations).where(invocations.c.id.in_(sa.select(BATCH.cte(True).c.id)))
EVENTS_OF = sa.select(events).where(events.c.invocation_id == sa.bindparam("invocation_id"))
TOUCH = (
    sa.update(invocations)
    .where(invocations.c.owner == sa.bindparam("who"))
    .values(crashes=invocations.c.crashes)
)
WITH_JSON_PARAM = sa.select(sa.cast(sa.bindparam("value", type_=sa.JSON), sa.Text).label("text"))
EXPANDING = sa.select(invocations.c.id).where(
    invocations.c.id.in_(sa.bindparam("ids", expanding=True))
)


@pytest.fixture
async def pg(migrated_pg: str) -> AsyncIterator[Store]:
    store = Store.postgres(migrated_pg, pool_size=2)
    try:
        yield store
    finally:
        await store.close()


async def made(store: Store, count: int) -> tuple[str, list[str]]:
    owner = f"direct-{uuid.uuid4()}"
    news = [NewInvocation(str(uuid.uuid4()), owner, None, {"n": i}, "h") for i in range(count)]
    await store.accept_many(news)
    for new in news:
        claim = await store.claim(new.id, "w")
        assert claim is not None
        events_ = [NewEvent("tick", {"i": 1.5, "s": "é"})]
        await store.append(AppendRequest(new.id, claim.attempt, events_))
    return owner, [n.id for n in news]


async def both(store: Store, statement: Any, params: dict[str, Any] | None = None) -> Any:
    """The statement's result both ways, in one transaction: direct, then SQLAlchemy's."""
    async with store.db.transaction() as conn:
        assert isinstance(conn, pg_direct.DirectConnection)
        direct = await conn.execute(statement, params)
        raw = await conn.get_raw_connection()
        assert raw is not None
        sa_conn: Any = conn._conn  # the SQLAlchemy connection it runs on
        return direct, await sa_conn.execute(statement, params)


async def test_rows_mappings_and_scalars_match_sqlalchemys(pg: Store) -> None:
    _, ids = await made(pg, 3)
    direct, plain = await both(pg, BY_IDS, BATCH.params([(i,) for i in ids]))
    assert isinstance(direct, pg_direct.Rows)
    assert pg_direct.plan_for(BY_IDS, None, pg.db.engine.sync_engine.dialect) is not None
    got, want = direct.mappings().all(), plain.mappings().all()
    assert sorted(got, key=lambda r: r["id"]) == sorted(
        (dict(r) for r in want), key=lambda r: r["id"]
    )
    for row in got:  # the same Python types, column by column (JSON, floats, times, text)
        peer = next(dict(r) for r in want if r["id"] == row["id"])
        assert {k: type(v) for k, v in row.items()} == {k: type(v) for k, v in peer.items()}

    direct, plain = await both(pg, EVENTS_OF, {"invocation_id": ids[0]})
    got_rows, want_rows = direct.all(), plain.all()
    assert [tuple(r) for r in got_rows] == [tuple(r) for r in want_rows]
    assert got_rows[-1].data == want_rows[-1].data == {"i": 1.5, "s": "é"}
    assert tuple(direct.first()) == tuple(want_rows[0])
    text = sa.text(
        "SELECT count(*) AS n, max(cursor) AS top FROM tether_events WHERE invocation_id = :i"
    )
    direct, plain = await both(pg, text, {"i": ids[0]})
    want = plain.one()
    assert direct.one() == tuple(want) and direct.one().n == want.n == 2


async def test_row_counts_and_empty_results_match(pg: Store) -> None:
    owner, _ = await made(pg, 4)
    direct, plain = await both(pg, TOUCH, {"who": owner})
    assert direct.rowcount == plain.rowcount == 4
    direct, plain = await both(pg, BY_IDS, BATCH.params([]))
    assert direct.all() == plain.all() == [] and direct.first() is None and direct.scalar() is None
    async with pg.db.transaction() as conn:
        assert await conn.scalar(sa.select(sa.literal(7))) == 7
        assert (await conn.execute(sa.select(sa.literal(7)))).scalars().all() == [7]


@pytest.mark.parametrize("statement", [WITH_JSON_PARAM, EXPANDING], ids=["json", "expanding"])
async def test_statements_sqlalchemy_must_render_or_process_take_its_path(
    pg: Store, statement: Any
) -> None:
    dialect = pg.db.engine.sync_engine.dialect
    params = {"value": {"a": [1, "x"]}} if statement is WITH_JSON_PARAM else {"ids": ["a", "b"]}
    assert pg_direct.plan_for(statement, params, dialect) is None
    async with pg.db.transaction() as conn:
        result = await conn.execute(statement, params)
        assert not isinstance(result, pg_direct.Rows)
        rows = result.all()
        if statement is WITH_JSON_PARAM:
            assert [json.loads(r.text) for r in rows] == [{"a": [1, "x"]}]
        else:
            assert rows == []


async def test_inserts_compile_for_the_columns_their_parameters_name(pg: Store) -> None:
    owner = f"direct-{uuid.uuid4()}"
    insert = sa.insert(thread_messages).returning(thread_messages.c.seq)
    message = {
        "owner": owner,
        "thread_id": "t",
        "invocation_id": "i",
        "role": "user",
        "content": "hi",
        "created_at": 1.0,
    }
    async with pg.db.transaction() as conn:
        first = await conn.execute(insert, {**message, "position": 0})  # seq: always generated
        assert isinstance(first, pg_direct.Rows)
        second = await conn.execute(insert, {"position": 1, **message})
        assert second.scalar() == first.scalar() + 1
        rows = await conn.execute(
            sa.select(thread_messages.c.position).where(thread_messages.c.owner == owner)
        )
        assert sorted(rows.scalars().all()) == [0, 1]


async def test_values_are_converted_as_sqlalchemy_converts_them(pg: Store) -> None:
    as_float = sa.type_coerce(sa.cast(sa.bindparam("v", type_=sa.Text), sa.Numeric), sa.Float)
    statement = sa.select(as_float.label("x"))
    direct, plain = await both(pg, statement, {"v": "1.25"})
    assert isinstance(direct, pg_direct.Rows)
    assert direct.scalar() == plain.scalar() == 1.25 and type(direct.scalar()) is float


async def test_a_statement_listener_sees_every_statement(pg: Store) -> None:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, text: str, *args: Any) -> None:
        seen.append(text)

    engine = pg.db.engine.sync_engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        async with pg.db.transaction() as conn:
            result = await conn.execute(BY_IDS, BATCH.params([("x",)]))
            assert not isinstance(result, pg_direct.Rows)
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert len(seen) == 1 and "some_ids" in seen[0]


async def test_driver_errors_are_sqlalchemys_and_map_the_same(pg: Store) -> None:
    owner = f"direct-{uuid.uuid4()}"
    row = {"owner": owner, "id": "secret-id", "created_at": 1.0, "updated_at": 1.0}
    insert = sa.insert(threads)
    async with pg.db.transaction() as conn:
        await conn.execute(insert, row)
    with pytest.raises(ValueRefused) as refused:
        async with pg.db.transaction() as conn:
            await conn.execute(insert, row)
    assert owner not in str(refused.value) and "secret-id" not in str(refused.value)
    with pytest.raises(sa.exc.IntegrityError) as raw:
        async with pg.db.engine.begin() as sa_conn:
            await pg_direct.DirectConnection(sa_conn).execute(insert, row)
    assert "secret-id" not in str(raw.value.params) and raw.value.hide_parameters


async def test_a_connection_the_error_broke_is_replaced(pg: Store) -> None:
    with pytest.raises(StoreUnavailable):
        async with pg.db.transaction() as conn:
            await conn.execute(sa.text("SELECT pg_terminate_backend(pg_backend_pid())"))
    for _ in range(3):  # every connection of the pool works again
        async with pg.db.transaction() as conn:
            assert await conn.scalar(sa.text("SELECT 1")) == 1
