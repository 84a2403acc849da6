"""A worker process SIGKILLed mid-run: replacement attempts through @app.recover, or worker_lost."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from tests.client import assert_clean_log, new_id
from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import (
    Db,
    api_for,
    attempts_started,
    holding,
    owner_of,
    start_workers,
    until,
    worker_pid,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

# The first attempt writes two ticks and holds; its replacement writes two ticks and finishes.
HOLD_THEN_RECOVER = {"attempt1": {"emit": 2, "sleep": 300}, "attempt2": {"emit": 2}}


async def test_twenty_runs_of_a_killed_worker_complete_through_recover(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url)
    _, base = cluster.start_gateway()
    [doomed] = start_workers(cluster, 1)
    db = Db(fresh_db)
    ids = [new_id() for _ in range(20)]
    async with api_for(base) as api:
        for invocation_id in ids:
            status, _ = await api.post(
                {"id": invocation_id, "input": HOLD_THEN_RECOVER, "background": True}
            )
            assert status == 202
        await until(
            lambda: db.all_match(ids, holding(3)), 30, "20 runs holding on the first worker"
        )
        [pid] = {worker_pid(r) for r in db.rows(ids).values()}
        assert owner_of(pid, [doomed]) is doomed
        [survivor] = start_workers(cluster, 1)

        os.kill(pid, signal.SIGKILL)
        await until(lambda: db.all_match(ids, lambda r: r["status"] == "completed"), 45, "recovery")

        for invocation_id in ids:
            _, state = await api.get(invocation_id)
            assert state["attempt"] == 2 and state["output"]["recovered"] is True, state
            events = await api.events(invocation_id)
            assert_clean_log(events)
            started = [e for e in events if e.type == "run.started"]
            assert [e.data["attempt"] for e in started] == [1, 2]
            after_replacement = events[events.index(started[1]) + 1 : -1]
            assert [e.data["attempt"] for e in after_replacement] == [
                2,
                2,
            ]  # the replacement's ticks
        assert worker_pid(db.row(ids[0])) != pid
        assert owner_of(worker_pid(db.row(ids[0])), [survivor]) is survivor


async def test_without_recover_a_killed_run_fails_worker_lost_and_the_sync_caller_gets_it(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url, app="tests.apps.contract:no_recover_app")
    _, base = cluster.start_gateway()
    workers = start_workers(cluster, 2)
    db = Db(fresh_db)
    invocation_id = new_id()
    async with api_for(base) as api:
        waiting = asyncio.create_task(
            api.post({"id": invocation_id, "input": {"emit": 1, "sleep": 300}})
        )
        await until(lambda: db.all_match([invocation_id], holding(2)), 30, "the run to start")
        pid = worker_pid(db.row(invocation_id))
        owner_of(pid, workers)
        os.kill(pid, signal.SIGKILL)

        status, body = await asyncio.wait_for(waiting, 30)  # answered, not left hanging
        assert status == 500, body
        assert body["status"] == "failed" and body["error"]["code"] == "worker_lost"
        _, state = await api.get(invocation_id)
        assert state["status"] == "failed" and state["attempt"] == 1
        events = await api.events(invocation_id)
        assert_clean_log(events)
        assert attempts_started(db.events(invocation_id)) == [1]
        assert events[-1].type == "run.failed" and events[-1].data["error"]["code"] == "worker_lost"
