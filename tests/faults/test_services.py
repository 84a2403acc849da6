"""Redis lost or flushed, PostgreSQL stopped and started: every invocation ends, and only once.

Both run on private servers this test starts (a redis-server and a PostgreSQL cluster on free
ports), so the shared ones other people test against are never disturbed.
"""

from __future__ import annotations

import pytest

from tests.client import new_id
from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import (
    TERMINAL,
    Db,
    PrivatePostgres,
    PrivateRedis,
    api_for,
    assert_clean_events,
    attempts_started,
    holding,
    log_has,
    process_logged,
    start_workers,
    until,
    worker_pid,
)
from tests.harness import http_ok

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


def ended_once(db: Db, ids: list[str]) -> None:
    """Every invocation completed by its first attempt, with one clean event log each."""
    for invocation_id, row in db.rows(ids).items():
        assert row["status"] == "completed", row
        events = db.events(invocation_id)
        assert_clean_events(events)
        assert attempts_started(events) == [1]


@pytest.mark.parametrize("fault", ["flushall", "restart"])
async def test_losing_redis_loses_no_invocation_and_runs_none_twice(
    fresh_db: str, private_redis: PrivateRedis, make_cluster: MakeCluster, fault: str
) -> None:
    # Four slots: of 16 two-second runs, four run, the rest wait as Redis messages.
    cluster = make_cluster(fresh_db, private_redis.url, TETHER_WORKER__CONCURRENCY="4")
    _, base = cluster.start_gateway()
    start_workers(cluster, 1)
    db = Db(fresh_db)
    ids = [new_id() for _ in range(16)]
    async with api_for(base) as api:
        for invocation_id in ids:
            body = {
                "id": invocation_id,
                "input": {"default": {"emit": 1, "sleep": 2}},
                "background": True,
            }
            assert (await api.post(body))[0] == 202
        await until(
            lambda: sum(r["status"] == "active" for r in db.rows(ids).values()) == 4,
            30,
            "4 running",
        )
        assert any(r["status"] == "queued" for r in db.rows(ids).values())

        if fault == "flushall":
            private_redis.flushall()
        else:
            private_redis.restart()

        await until(
            lambda: db.all_match(ids, lambda r: r["status"] in TERMINAL), 60, "every run to end"
        )
        ended_once(db, ids)
        # The gateway and the worker reconnected: a new sync request goes all the way through.
        status, answer = await api.post({"id": new_id(), "input": {"default": {"emit": 1}}})
        assert status == 200 and answer["status"] == "completed", answer


@pytest.mark.parametrize("outage", ["brief", "past_stale"])
async def test_postgresql_down_mid_run_every_invocation_ends_and_everyone_reconnects(
    private_pg: PrivatePostgres, redis_url: str, make_cluster: MakeCluster, outage: str
) -> None:
    cluster = make_cluster(private_pg.url, redis_url)
    _, base = cluster.start_gateway()
    workers = start_workers(cluster, 2)
    db = Db(private_pg.url)
    # Write an event every 0.4 s for 8 s: still running when a worker gives its attempts up,
    # which is STALE_AFTER (3 s) after its last good heartbeat.
    writing = [new_id() for _ in range(8)]
    ending = [new_id() for _ in range(2)]  # end 0.5 s in: while the database is down
    ids = writing + ending
    async with api_for(base) as api:
        for invocation_id in ids:
            spec = (
                {"emit": 20, "emit_sleep": 0.4}
                if invocation_id in writing
                else {"emit": 1, "sleep": 0.5}
            )
            body = {"id": invocation_id, "input": {"default": spec}, "background": True}
            assert (await api.post(body))[0] == 202
        await until(lambda: db.all_match(ids, holding(2)), 30, "every run writing")
        holders = {worker_pid(row) for row in db.rows(ids).values()}

        private_pg.stop()
        # Down until everyone noticed: the gateway is not ready, heartbeats and an outcome failed.
        await until(lambda: not http_ok(f"{base}/readyz"), 10, "the gateway to notice")
        await until(
            lambda: any(log_has(w, "heartbeat failed") for w in workers), 10, "heartbeats to fail"
        )
        await until(
            lambda: any(log_has(w, "writing the outcome failed") for w in workers),
            10,
            "a finish to fail",
        )
        if outage == "past_stale":  # long enough for every holder to give its attempts up
            await until(
                lambda: all(process_logged(workers, pid, "no heartbeat for") for pid in holders),
                20,
                "attempts to stop",
            )
        private_pg.start()

        def all_ended() -> bool:
            rows = db.try_query("SELECT status FROM tether_invocations WHERE id = ANY(%s)", [ids])
            return (
                rows is not None
                and len(rows) == len(ids)
                and all(r["status"] in TERMINAL for r in rows)
            )

        await until(all_ended, 60, "every run to end")
        started = {}
        for invocation_id, row in db.rows(ids).items():
            assert row["status"] == "completed", row
            events = db.events(invocation_id)
            assert_clean_events(events)
            started[invocation_id] = attempts_started(events)
        if outage == "brief":  # shorter than stale_after: nothing was replaced, nothing ran twice
            assert all(a == [1] for a in started.values()), started
        else:
            assert any(a == [1, 2] for a in started.values()), started
        await until(lambda: http_ok(f"{base}/readyz"), 30, "the gateway to be ready again")
        status, answer = await api.post({"id": new_id(), "input": {"default": {"emit": 1}}})
        assert status == 200 and answer["status"] == "completed", answer
        _, state = await api.get(ids[0])
        assert state["status"] == "completed"
