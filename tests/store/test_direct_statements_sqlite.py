"""The embedded store's statements on sqlite3 directly (:mod:`tether.store.plans`): the same
rows and errors as SQLAlchemy's synchronous path, a plan per database for a statement both
stores run, and SQLAlchemy's path while someone listens to the statements."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tether.store import plans
from tether.store.errors import ValueRefused
from tether.store.schema import NewInvocation, invocations, threads
from tether.store.store import Store

BY_OWNER = sa.select(invocations.c.id, invocations.c.input, invocations.c.created_at).where(
    invocations.c.owner == sa.bindparam("owner")
)


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[Store]:
    store = Store.embedded(str(tmp_path / "t.db"))
    await store.migrate()
    try:
        yield store
    finally:
        await store.close()


async def rows_both_ways(store: Store, statement: Any, params: dict[str, Any]) -> Any:
    plans.plan_for(statement, params, store.db.engine.sync_engine.dialect)  # its first run
    async with store.db.transaction() as conn:
        direct = await conn.execute(statement, params)
        plain = conn._conn.execute(statement, params)  # type: ignore[attr-defined]
        return direct, plain


async def test_rows_match_sqlalchemys_and_json_comes_back_decoded(embedded: Store) -> None:
    owner = f"o-{uuid.uuid4()}"
    await embedded.accept_many([NewInvocation(str(uuid.uuid4()), owner, None, {"a": [1]}, "h")])
    direct, plain = await rows_both_ways(embedded, BY_OWNER, {"owner": owner})
    assert isinstance(direct, plans.Rows)
    got, want = direct.all(), plain.all()
    assert [tuple(r) for r in got] == [tuple(r) for r in want]
    assert got[0].input == {"a": [1]} and type(got[0].created_at) is float


async def test_a_statement_both_stores_run_gets_a_plan_for_each(
    embedded: Store, migrated_pg: str
) -> None:
    pg = Store.postgres(migrated_pg, pool_size=1)
    try:
        for store in (embedded, pg, embedded, pg):
            owner = f"o-{uuid.uuid4()}"
            await store.accept_many([NewInvocation(str(uuid.uuid4()), owner, None, {}, "h")])
            for _ in range(2):
                async with store.db.transaction() as conn:
                    found = await conn.execute(BY_OWNER, {"owner": owner})
                    assert [r.input for r in found.all()] == [{}]
    finally:
        await pg.close()


async def test_errors_map_as_before_and_a_listener_sees_every_statement(embedded: Store) -> None:
    insert = sa.insert(threads)
    row = {"owner": "o", "id": "secret-id", "created_at": 1.0, "updated_at": 1.0}
    async with embedded.db.transaction() as conn:
        await conn.execute(insert, row)
    with pytest.raises(ValueRefused) as refused:
        async with embedded.db.transaction() as conn:
            await conn.execute(insert, row)  # its second run: the plan's
    assert "secret-id" not in str(refused.value)

    seen: list[str] = []
    engine = embedded.db.sync.writer.engine if embedded.db.sync else None
    assert engine is not None
    sa.event.listen(engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    async with embedded.db.transaction() as conn:
        result = await conn.execute(BY_OWNER, {"owner": "nobody"})
    assert not isinstance(result, plans.Rows) and any("tether_invocations" in t for t in seen)
