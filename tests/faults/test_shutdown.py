"""SIGTERM: a worker finishes its runs within the grace period; the rest goes to recovery."""

from __future__ import annotations

import os
import signal

import pytest

from tests.client import new_id
from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import (
    Db,
    api_for,
    assert_clean_events,
    attempts_started,
    holding,
    owner_of,
    start_workers,
    until,
    worker_pid,
)
from tests.harness import Proc

pytestmark = [pytest.mark.faults, pytest.mark.timeout(90)]


def terminate(proc: Proc, target: str) -> None:
    """SIGTERM as an orchestrator sends it: to the main process only (Kubernetes, Docker), or to
    the whole process group (systemd's default, a shell's ``kill -- -pgid``)."""
    if target == "main":
        os.kill(proc.pid, signal.SIGTERM)
    else:
        proc.signal(signal.SIGTERM)


@pytest.mark.parametrize("target", ["main", "group"])
async def test_a_sigtermed_worker_finishes_its_run_within_the_grace_period(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, target: str
) -> None:
    cluster = make_cluster(fresh_db, redis_url)  # grace 10 s
    _, base = cluster.start_gateway()
    workers = start_workers(cluster, 2)  # the other one would take over if recovery were needed
    db = Db(fresh_db)
    invocation_id = new_id()
    async with api_for(base) as api:
        body = {
            "id": invocation_id,
            "input": {"default": {"emit": 1, "sleep": 3}},
            "background": True,
        }
        assert (await api.post(body))[0] == 202
        await until(lambda: db.all_match([invocation_id], holding(2)), 30, "the run to start")
        pid = worker_pid(db.row(invocation_id))
        stopping = owner_of(pid, workers)

        terminate(stopping, target)
        await until(lambda: stopping.popen.poll() is not None, 30, "the worker to exit")

        row = db.row(invocation_id)
        assert row["status"] == "completed" and row["attempt"] == 1 and worker_pid(row) == pid
        events = db.events(invocation_id)
        assert_clean_events(events)
        assert attempts_started(events) == [1]
        assert "handed" not in stopping.log()
        _, state = await api.get(invocation_id)
        assert state["output"]["recovered"] is False


async def test_a_run_longer_than_the_grace_period_is_handed_back_and_recovered(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url, TETHER_TIMERS__SHUTDOWN_GRACE="1")
    _, base = cluster.start_gateway()
    workers = start_workers(cluster, 2)
    db = Db(fresh_db)
    invocation_id = new_id()
    spec = {"attempt1": {"emit": 1, "sleep": 300}, "attempt2": {"emit": 1}}
    async with api_for(base) as api:
        assert (await api.post({"id": invocation_id, "input": spec, "background": True}))[0] == 202
        await until(lambda: db.all_match([invocation_id], holding(2)), 30, "the run to start")
        stopping = owner_of(worker_pid(db.row(invocation_id)), workers)

        terminate(stopping, "main")
        await until(lambda: stopping.popen.poll() is not None, 30, "the worker to exit")
        assert "handed 1 unfinished attempts back for recovery" in stopping.log()
        await until(lambda: db.row(invocation_id)["status"] == "completed", 30, "the replacement")
        events = db.events(invocation_id)
        assert_clean_events(events)
        assert attempts_started(events) == [1, 2]
