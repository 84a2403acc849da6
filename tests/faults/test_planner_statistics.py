"""A real ``tether worker``'s reaper analyzes a backlog that arrived after a quiet spell's
``ANALYZE`` (docs/operations.md, "Vacuum"), through its settings, on its own."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import Db
from tests.harness import wait_for
from tether.store.store import Store

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


def believed_queued(db: Db) -> float:
    [row] = db.query(
        "EXPLAIN (FORMAT JSON) SELECT 1 FROM tether_invocations WHERE status = 'queued'"
    )
    return float(row["QUERY PLAN"][0]["Plan"]["Plan Rows"])


async def nothing_may_start(url: str) -> None:
    """A global cap of 0: the backlog stays queued for the reaper's check to see."""
    store = Store.postgres(url, pool_size=1)
    try:
        await store.tenants.set_global_max_active(0)
    finally:
        await store.close()


def test_a_worker_analyzes_a_backlog_after_a_quiet_spell(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    db = Db(fresh_db)
    asyncio.run(nothing_may_start(fresh_db))
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE tether_invocations SET (autovacuum_enabled = off)")
        conn.execute(
            "INSERT INTO tether_invocations (id, owner, tenant, input, request_hash, status,"
            " created_at, enqueued_at, started_at, finished_at)"
            " SELECT 'done-' || g, 'o', 'o', '{}', 'h', 'completed', 1, 1, 1, 2"
            " FROM generate_series(1, 5000) AS g"
        )
        conn.execute("VACUUM ANALYZE tether_invocations")  # the quiet spell's
        conn.execute(
            "INSERT INTO tether_invocations (id, owner, tenant, input, request_hash, status,"
            " created_at, enqueued_at) SELECT 'q-' || g, 't' || (g % 16), 't' || (g % 16),"
            " '{}', 'h', 'queued', 1, 1 FROM generate_series(1, 5000) AS g"
        )
        conn.execute("SELECT pg_stat_force_next_flush()")
    assert believed_queued(db) < 10

    cluster = make_cluster(fresh_db, redis_url, TETHER_TIMERS__STATISTICS_CHECK="0.5")
    worker = cluster.start_worker()
    wait_for(lambda: "analyzed tether_invocations" in worker.log(), 60, "the reaper's ANALYZE")
    assert "the planner believed 1 queued where 1000+ are" in worker.log()
    assert believed_queued(db) > 2500
