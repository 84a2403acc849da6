"""Redis flushed or restarted with 200 invocations queued: every one runs, once, long before
requeue_after, because the workers notice the loss and re-send what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.client import new_id
from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import (
    Db,
    PrivateRedis,
    api_for,
    assert_clean_events,
    attempts_started,
    log_has,
    start_workers,
    until,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(150)]

QUEUED = 200
SLOTS = 4


@pytest.mark.parametrize("fault", ["flushall", "restart"])
async def test_losing_redis_with_200_queued_runs_each_once_without_waiting_for_requeue_after(
    fresh_db: str,
    private_redis: PrivateRedis,
    make_cluster: MakeCluster,
    tmp_path: Path,
    fault: str,
) -> None:
    # requeue_after 300 s: anything that runs within the test's deadlines was re-sent on notice
    cluster = make_cluster(
        fresh_db,
        private_redis.url,
        TETHER_TIMERS__REQUEUE_AFTER="300",
        TETHER_WORKER__CONCURRENCY=str(SLOTS),
    )
    _, base = cluster.start_gateway()
    [worker] = start_workers(cluster, 1)
    db = Db(fresh_db)
    go = tmp_path / "go"
    blockers = [new_id() for _ in range(SLOTS)]
    queued = [new_id() for _ in range(QUEUED)]
    async with api_for(base) as api:
        for invocation_id in blockers:  # hold every slot until the test says go
            spec = {"default": {"after_file": str(go)}}
            body = {"id": invocation_id, "input": spec, "background": True}
            assert (await api.post(body))[0] == 202
        await until(
            lambda: db.all_match(blockers, lambda r: r["status"] == "active"), 30, "slots full"
        )
        for invocation_id in queued:
            body = {"id": invocation_id, "input": {"default": {"emit": 1}}, "background": True}
            assert (await api.post(body))[0] == 202
        assert db.all_match(queued, lambda r: r["status"] == "queued")

        if fault == "flushall":
            private_redis.flushall()
        else:
            private_redis.restart()
        await until(
            lambda: log_has(worker, f"re-sent {QUEUED} queued invocations"),
            30,
            "the worker to notice and re-send",
        )
        go.touch()

        ids = blockers + queued
        await until(
            lambda: db.all_match(ids, lambda r: r["status"] == "completed"), 90, "every run"
        )
        for invocation_id in ids:
            events = db.events(invocation_id)
            assert_clean_events(events)
            assert attempts_started(events) == [1], invocation_id
