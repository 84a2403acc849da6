"""A PostgreSQL transaction whose statements all ran on psycopg directly ends there too
(``DirectConnection.end``): committed or rolled back as SQLAlchemy's transaction would, a failed
commit raised as the same store error, a connection lost at the commit replaced; a statement
that took SQLAlchemy's path has its transaction end there."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from psycopg import pq

from tests.store.test_direct_statements import BACKEND, known, pg_admin
from tether.store.errors import StoreError, StoreUnavailable
from tether.store.schema import threads
from tether.store.store import Store


class Ends:
    """SQLAlchemy's own commits and rollbacks on the engine (none on the direct path), and the
    driver's transaction state as each connection goes back to the pool (before the pool's own
    rollback): a transaction ended by the store leaves it idle."""

    def __init__(self, store: Store) -> None:
        self.engine = store.db.engine.sync_engine
        self.seen: list[str] = []
        self.returned: list[pq.TransactionStatus] = []

    def __enter__(self) -> Ends:
        sa.event.listen(self.engine, "commit", self._commit)
        sa.event.listen(self.engine, "rollback", self._rollback)
        sa.event.listen(self.engine.pool, "reset", self._reset)
        return self

    def __exit__(self, *exc: object) -> None:
        sa.event.remove(self.engine, "commit", self._commit)
        sa.event.remove(self.engine, "rollback", self._rollback)
        sa.event.remove(self.engine.pool, "reset", self._reset)

    def _commit(self, _conn: Any) -> None:
        self.seen.append("commit")

    def _rollback(self, _conn: Any) -> None:
        self.seen.append("rollback")

    def _reset(self, dbapi_connection: Any, _record: Any, _state: Any) -> None:
        self.returned.append(dbapi_connection.driver_connection.info.transaction_status)


def thread_row(owner: str) -> dict[str, Any]:
    return {"owner": owner, "id": str(uuid.uuid4()), "created_at": 1.0, "updated_at": 1.0}


async def owned(store: Store, owner: str) -> int:
    async with store.db.connection() as conn:
        count = await conn.scalar(sa.select(sa.func.count()).where(threads.c.owner == owner))
    return int(count or 0)


async def test_direct_statements_commit_and_roll_back_on_psycopg(pg: Store) -> None:
    insert, owner = sa.insert(threads), f"direct-{uuid.uuid4()}"
    known(pg, insert, thread_row(owner))
    with Ends(pg) as ends:
        async with pg.db.transaction() as conn:
            await conn.execute(insert, thread_row(owner))
        with pytest.raises(RuntimeError):
            async with pg.db.transaction() as conn:
                await conn.execute(insert, thread_row(owner))
                raise RuntimeError("the block failed")
        async with pg.db.transaction():
            pass  # no statement: nothing to end
    assert ends.seen == []
    assert ends.returned == [pq.TransactionStatus.IDLE] * 3
    assert await owned(pg, owner) == 1


async def test_direct_and_sqlalchemy_statements_share_one_transaction(pg: Store) -> None:
    insert, owner = sa.insert(threads), f"direct-{uuid.uuid4()}"
    known(pg, insert, thread_row(owner))
    sqlalchemys = {"logging_token": "its path"}  # an option on the call: SQLAlchemy's path
    with Ends(pg) as ends:
        async with pg.db.transaction() as conn:
            await conn.execute(insert, thread_row(owner))
            await conn.execute(insert, thread_row(owner), execution_options=sqlalchemys)
        with pytest.raises(RuntimeError):
            async with pg.db.transaction() as conn:
                await conn.execute(insert, thread_row(owner), execution_options=sqlalchemys)
                await conn.execute(insert, thread_row(owner))
                raise RuntimeError("the block failed")
    assert ends.seen == ["commit", "rollback"]
    assert await owned(pg, owner) == 2


async def test_a_statement_on_sqlalchemys_path_ends_its_transaction_there(pg: Store) -> None:
    owner = f"direct-{uuid.uuid4()}"
    first_run = sa.insert(threads).values(owner=sa.bindparam("who"))  # no plan yet: SQLAlchemy's
    with Ends(pg) as ends:
        async with pg.db.transaction() as conn:
            await conn.execute(first_run, {**thread_row(owner), "who": owner})
    assert ends.seen == ["commit"]
    assert await owned(pg, owner) == 1


async def test_a_commit_the_database_refuses_is_a_store_error(pg: Store, migrated_pg: str) -> None:
    table = f"deferred_{uuid.uuid4().hex[:8]}"
    async with pg_admin(migrated_pg) as admin:
        await admin.execute(
            sa.text(
                f"CREATE TABLE {table} (id int PRIMARY KEY, "
                f"ref int REFERENCES {table} (id) DEFERRABLE INITIALLY DEFERRED)"
            )
        )
    dangling = sa.text(f"INSERT INTO {table} (id, ref) VALUES (:id, 999)")
    known(pg, dangling, {"id": 1})
    try:
        with pytest.raises(StoreError):
            async with pg.db.transaction() as conn:
                await conn.execute(dangling, {"id": 1})  # checked at the commit
        async with pg.db.transaction() as conn:  # the connection works on
            assert await conn.scalar(sa.select(sa.literal(1))) == 1
    finally:
        async with pg_admin(migrated_pg) as admin:
            await admin.execute(sa.text(f"DROP TABLE {table}"))


def thread_insert(pg: Store) -> tuple[sa.Insert, str]:
    """An insert of a thread of a new owner, and that owner, with the statements the tests of a
    lost connection run known to the store's plans (so they take the direct path)."""
    insert, owner = sa.insert(threads), f"direct-{uuid.uuid4()}"
    known(pg, insert, thread_row(owner))
    known(pg, BACKEND)
    return insert, owner


async def test_a_connection_lost_before_the_commit_is_replaced(pg: Store, migrated_pg: str) -> None:
    insert, owner = thread_insert(pg)
    with pytest.raises(StoreUnavailable):
        async with pg.db.transaction() as conn:
            await conn.execute(insert, thread_row(owner))
            await lose(conn, migrated_pg)
    assert await owned(pg, owner) == 0
    await every_connection_works(pg)


async def test_a_connection_a_statement_lost_commits_nothing_and_says_so(
    pg: Store, migrated_pg: str
) -> None:
    """A block that caught its statement's error still may not commit: the store raises."""
    insert, owner = thread_insert(pg)
    with pytest.raises(StoreError):
        async with pg.db.transaction() as conn:
            await conn.execute(insert, thread_row(owner))
            await lose(conn, migrated_pg)
            with pytest.raises(sa.exc.DBAPIError):
                await conn.execute(BACKEND)
    assert await owned(pg, owner) == 0
    await every_connection_works(pg)


async def lose(conn: Any, url: str) -> None:
    """End the server's side of ``conn`` from another connection."""
    pid = await conn.scalar(BACKEND)
    async with pg_admin(url) as admin:
        await admin.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})


async def every_connection_works(store: Store) -> None:
    for _ in range(3):
        async with store.db.transaction() as conn:
            assert await conn.scalar(sa.select(sa.literal(1))) == 1
