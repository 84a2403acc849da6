"""PostgreSQL statements on psycopg directly (:mod:`tether.store.pg_direct`): the same rows, row
counts and errors as SQLAlchemy's own path, and SQLAlchemy's path wherever the direct one would
not send the same statement or someone listens to the statements."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import uuid
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import create_async_engine

from tether.store import pg_direct, plans
from tether.store.bound import BoundBatch, Carriage
from tether.store.errors import StoreUnavailable, ValueRefused
from tether.store.schema import (
    JsonValue,
    NewInvocation,
    events,
    invocations,
    tenant_passes,
    thread_messages,
    threads,
)
from tether.store.store import AppendRequest, NewEvent, Store

BATCH = BoundBatch("some_ids", (sa.column("id", sa.Text),))
BY_IDS = sa.select(invocations).where(
    invocations.c.id.in_(sa.select(BATCH.cte(Carriage.JSONB).c.id))
)
EVENTS_OF = sa.select(events).where(events.c.invocation_id == sa.bindparam("invocation_id"))
TOUCH = (
    sa.update(invocations)
    .where(invocations.c.owner == sa.bindparam("who"))
    .values(crashes=invocations.c.crashes)
)
WITH_JSON_PARAM = sa.select(
    sa.cast(sa.bindparam("value", type_=JsonValue), sa.Text).label("text"),
    sa.cast(sa.bindparam("names", type_=ARRAY(sa.Text)), sa.Text).label("names"),
)
EXPANDING = sa.select(invocations.c.id).where(
    invocations.c.id.in_(sa.bindparam("ids", expanding=True))
)


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


def known(store: Store, statement: Any, params: dict[str, Any] | None = None) -> None:
    """Mark the statement as run before: a statement gets a plan on its second run."""
    plans.plan_for(statement, params, store.db.engine.sync_engine.dialect)


async def both(store: Store, statement: Any, params: dict[str, Any] | None = None) -> Any:
    """The statement's result both ways, in one transaction: direct, then SQLAlchemy's."""
    known(store, statement, params)
    async with store.db.transaction() as conn:
        assert isinstance(conn, pg_direct.DirectConnection)
        direct = await conn.execute(statement, params)
        raw = await conn.get_raw_connection()
        assert raw is not None
        sa_conn: Any = conn._conn  # the SQLAlchemy connection it runs on
        return direct, await sa_conn.execute(statement, params)


async def test_rows_mappings_and_scalars_match_sqlalchemys(pg: Store) -> None:
    _, ids = await made(pg, 3)
    direct, plain = await both(
        pg, BY_IDS, BATCH.params([(i,) for i in ids], carriage=Carriage.JSONB)
    )
    assert isinstance(direct, plans.Rows)
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
    counted = sa.select(
        sa.func.count().label("n"), sa.func.max(events.c.cursor).label("top")
    ).where(events.c.invocation_id == sa.bindparam("i"))
    direct, plain = await both(pg, counted, {"i": ids[0]})
    want = plain.one()
    assert direct.one() == tuple(want) and direct.one().n == want.n == 2


async def test_row_counts_and_empty_results_match(pg: Store) -> None:
    owner, _ = await made(pg, 4)
    direct, plain = await both(pg, TOUCH, {"who": owner})
    assert direct.rowcount == plain.rowcount == 4
    direct, plain = await both(pg, BY_IDS, BATCH.params([], carriage=Carriage.JSONB))
    assert direct.all() == plain.all() == [] and direct.first() is None and direct.scalar() is None
    async with pg.db.transaction() as conn:
        assert await conn.scalar(sa.select(sa.literal(7))) == 7
        assert (await conn.execute(sa.select(sa.literal(7)))).scalars().all() == [7]


async def test_parameters_are_processed_as_sqlalchemy_processes_them(pg: Store) -> None:
    params = {"value": {"a": [1, "x"], "none": None}, "names": ("a", "b")}  # a tuple: a list
    direct, plain = await both(pg, WITH_JSON_PARAM, params)
    assert isinstance(direct, plans.Rows)
    [got], [want] = direct.all(), plain.all()
    assert tuple(got) == tuple(want)
    assert json.loads(got.text) == params["value"] and got.names == "{a,b}"


async def test_a_statement_sqlalchemy_renders_per_execution_takes_its_path(pg: Store) -> None:
    params = {"ids": ["a", "b"]}
    known(pg, EXPANDING, params)
    assert plans.plan_for(EXPANDING, params, pg.db.engine.sync_engine.dialect) is None
    async with pg.db.transaction() as conn:
        result = await conn.execute(EXPANDING, params)
        assert not isinstance(result, plans.Rows) and result.all() == []


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
    known(pg, insert, {**message, "position": 0})
    async with pg.db.transaction() as conn:
        first = await conn.execute(insert, {**message, "position": 0})  # seq: always generated
        assert isinstance(first, plans.Rows)
        known(pg, insert, {**message, "position": 1, "content": "x"})  # the same columns
        second = await conn.execute(insert, {"position": 1, **message})
        assert isinstance(second, plans.Rows)
        assert second.scalar() == first.scalar() + 1
        rows = await conn.execute(
            sa.select(thread_messages.c.position).where(thread_messages.c.owner == owner)
        )
        assert sorted(rows.scalars().all()) == [0, 1]


async def test_values_are_converted_as_sqlalchemy_converts_them(pg: Store) -> None:
    as_float = sa.type_coerce(sa.cast(sa.bindparam("v", type_=sa.Text), sa.Numeric), sa.Float)
    statement = sa.select(as_float.label("x"))
    direct, plain = await both(pg, statement, {"v": "1.25"})
    assert isinstance(direct, plans.Rows)
    assert direct.scalar() == plain.scalar() == 1.25 and type(direct.scalar()) is float


async def test_several_parameter_sets_run_as_one_pipeline(pg: Store) -> None:
    owner = f"direct-{uuid.uuid4()}"
    upsert = pg.db.dialect.upsert_on(tenant_passes, "tenant")
    rows = [{"tenant": f"{owner}-{k}", "pass": float(k)} for k in range(3)]
    known(pg, upsert, rows[0])
    async with pg.db.transaction() as conn:
        result = await conn.execute(upsert, rows)
        assert isinstance(result, plans.Rows) and result.rowcount == 3
        await conn.execute(upsert, [{"tenant": rows[0]["tenant"], "pass": 9.5}])
        mixed = [{"tenant": f"{owner}-m", "pass": 1.0}, {"pass": 2.0, "tenant": f"{owner}-n"}]
        assert isinstance(await conn.execute(upsert, mixed), plans.Rows)
        stored = await conn.execute(
            sa.select(tenant_passes.c.tenant, tenant_passes.c["pass"])
            .where(tenant_passes.c.tenant.startswith(owner))
            .order_by(tenant_passes.c.tenant)
        )
        assert [tuple(r) for r in stored.all()] == [
            (f"{owner}-0", 9.5),
            (f"{owner}-1", 1.0),
            (f"{owner}-2", 2.0),
            (f"{owner}-m", 1.0),
            (f"{owner}-n", 2.0),
        ]
        returning = upsert.returning(tenant_passes.c.tenant)
        known(pg, returning, rows[0])
        again = await conn.execute(returning, rows)  # rows back from several sets: SQLAlchemy's
        assert not isinstance(again, plans.Rows)


async def test_only_a_statement_run_again_gets_a_plan(pg: Store) -> None:
    dialect = pg.db.engine.sync_engine.dialect

    def built() -> Any:  # a statement built anew for each call
        return sa.select(threads.c.id).where(threads.c.owner == "nobody")

    for _ in range(3):
        assert plans.plan_for(built(), None, dialect) is None
    kept = built()
    assert plans.plan_for(kept, None, dialect) is None
    assert plans.plan_for(kept, None, dialect) is not None
    async with pg.db.transaction() as conn:
        assert not isinstance(await conn.execute(built()), plans.Rows)
        assert isinstance(await conn.execute(kept), plans.Rows)


async def test_a_statement_listener_sees_every_statement(pg: Store) -> None:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, text: str, *args: Any) -> None:
        seen.append(text)

    engine = pg.db.engine.sync_engine
    known(pg, BY_IDS)
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        async with pg.db.transaction() as conn:
            result = await conn.execute(BY_IDS, BATCH.params([("x",)], carriage=Carriage.JSONB))
            assert not isinstance(result, plans.Rows)
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


SUICIDE = sa.select(sa.func.pg_terminate_backend(sa.func.pg_backend_pid()).label("done"))
BACKEND = sa.select(sa.func.pg_backend_pid().label("pid"))
TWO = sa.select(sa.literal(2).label("two"))


async def test_a_connection_the_error_broke_is_replaced(pg: Store) -> None:
    known(pg, SUICIDE)
    with pytest.raises(StoreUnavailable):
        async with pg.db.transaction() as conn:
            await conn.execute(SUICIDE)
    for _ in range(3):  # every connection of the pool works again
        async with pg.db.transaction() as conn:
            assert await conn.scalar(sa.select(sa.literal(1))) == 1


@pytest.mark.parametrize("kind", ["transaction", "connection", "autocommit"])
async def test_a_lost_server_costs_one_failure_not_one_per_pooled_connection(
    migrated_pg: str, kind: str
) -> None:
    """As SQLAlchemy does on a disconnect: every connection pooled before it is replaced at its
    next checkout, not handed out to fail one request each."""
    store = Store.postgres(migrated_pg, pool_size=6)  # its reader's: 3
    try:
        lend = getattr(store.db, kind)
        known(store, BACKEND)
        pids: list[int] = []
        held = asyncio.Event()

        async def hold() -> None:  # three connections in the pool at once
            async with lend() as conn:
                pids.append(await conn.scalar(BACKEND))
                if len(pids) == 3:
                    held.set()
                await held.wait()

        await asyncio.gather(*(hold() for _ in range(3)))
        async with pg_admin(migrated_pg) as admin:
            await admin.execute(
                sa.text("SELECT pg_terminate_backend(pid) FROM unnest(CAST(:pids AS int[])) pid"),
                {"pids": pids},
            )
        answers: list[bool | str] = []
        for _ in range(4):
            try:
                async with lend() as conn:
                    answers.append(await conn.scalar(BACKEND) not in pids)
            except StoreUnavailable:
                answers.append("unavailable")
        assert answers == ["unavailable", True, True, True]
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def pg_admin(url: str) -> AsyncIterator[Any]:
    engine = create_async_engine(url, poolclass=sa.pool.NullPool)
    try:
        async with engine.begin() as conn:
            yield conn
    finally:
        await engine.dispose()


async def test_options_that_change_a_run_take_sqlalchemys_path(pg: Store) -> None:
    dialect = pg.db.engine.sync_engine.dialect
    with_options = BY_IDS.execution_options(yield_per=10)
    known(pg, with_options)
    assert plans.plan_for(with_options, None, dialect) is None
    async with pg.db.engine.connect() as sa_conn:
        await sa_conn.execution_options(schema_translate_map={None: "public"})
        conn = pg_direct.DirectConnection(sa_conn)
        result = await conn.execute(BY_IDS, BATCH.params([("x",)], carriage=Carriage.JSONB))
        assert not isinstance(result, plans.Rows)


def test_a_statement_run_once_is_not_kept_alive(pg: Store) -> None:
    """Only to know its second run: a one-off statement holds its values (a checkpoint's)."""
    one_off = sa.select(sa.literal("x" * 100_000).label("v"))
    known(pg, one_off)
    kept = weakref.ref(one_off)
    del one_off
    gc.collect()
    assert kept() is None


def test_columns_a_named_tuple_would_rename_take_sqlalchemys_path(pg: Store) -> None:
    dialect = pg.db.engine.sync_engine.dialect
    for label in ("pass", "_hidden", "count", "two words"):
        statement = sa.select(sa.literal(1).label(label))
        known(pg, statement)
        assert plans.plan_for(statement, None, dialect) is None, label
    twice = sa.select(sa.literal(1).label("a"), sa.literal(2).label("a"))
    known(pg, twice)
    assert plans.plan_for(twice, None, dialect) is None


async def test_a_text_names_its_columns_with_its_first_result(pg: Store) -> None:
    dialect = pg.db.engine.sync_engine.dialect
    plain = sa.text("SELECT 1 AS one, 'x' AS two")
    odd = sa.text('SELECT 1 AS "pass", 2 AS "count"')
    for statement, values in ((plain, (1, "x")), (odd, (1, 2))):
        known(pg, statement)
        async with pg.db.transaction() as conn:
            first = await conn.execute(statement)
            assert isinstance(first, plans.Rows) and tuple(first.one()) == values
    async with pg.db.transaction() as conn:
        again = await conn.execute(plain)
        assert isinstance(again, plans.Rows) and again.one().two == "x"
        assert again.mappings().first() == {"one": 1, "two": "x"}
        later = await conn.execute(odd)  # keys a named tuple would rename: SQLAlchemy's from now
        assert not isinstance(later, plans.Rows) and later.one().count == 2
    assert plans.plan_for(odd, None, dialect) is None


async def test_an_insert_without_parameters_inserts_the_defaults(pg: Store) -> None:
    metadata = sa.MetaData()
    scratch = sa.Table(
        f"direct_scratch_{uuid.uuid4().hex[:8]}",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("n", sa.Integer, server_default="7", nullable=False),
    )
    async with pg.db.engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    try:
        insert = scratch.insert()
        known(pg, insert)
        async with pg.db.transaction() as conn:
            done = await conn.execute(insert)  # compiled as SQLAlchemy does: no column bound
            assert isinstance(done, plans.Rows) and done.rowcount == 1
            assert (await conn.execute(sa.select(scratch.c.n))).scalars().all() == [7]
    finally:
        async with pg.db.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)


INSERT_THREAD = sa.insert(threads)


async def test_a_checkout_runs_its_statements_on_one_cursor(pg: Store) -> None:
    """Every direct statement of a checkout shares one cursor, each with its own rows; a
    failed one leaves the next checkout's statements working; a checkout gets a cursor of its
    own."""
    known(pg, BACKEND)
    known(pg, TWO)
    row = {"owner": f"cursor-{uuid.uuid4()}", "id": "one", "created_at": 1.0, "updated_at": 1.0}
    known(pg, INSERT_THREAD, row)
    async with pg.db.transaction() as conn:
        assert isinstance(conn, pg_direct.DirectConnection)
        assert isinstance(await conn.scalar(BACKEND), int)
        first = conn._cursor
        assert first is not None
        assert await conn.scalar(TWO) == 2  # not the row of the statement before
        await conn.execute(INSERT_THREAD, row)
        assert conn._cursor is first
    with pytest.raises(ValueRefused):
        async with pg.db.transaction() as conn:
            assert isinstance(conn, pg_direct.DirectConnection)
            await conn.scalar(BACKEND)
            failed = conn._cursor
            await conn.execute(INSERT_THREAD, row)  # the same key again, on that cursor
    async with pg.db.transaction() as conn:
        assert isinstance(conn, pg_direct.DirectConnection)
        assert await conn.scalar(TWO) == 2
        assert conn._cursor is not None and conn._cursor not in (first, failed)
