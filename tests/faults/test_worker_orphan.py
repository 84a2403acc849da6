"""``kill -9`` of ``tether worker`` (Dramatiq's main process): its worker processes notice that
their parent is gone, stop as on SIGTERM (the running attempt is handed back after the grace
period) and exit; the next worker recovers the run. Their output never depended on that
process: they write their log lines themselves."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.client import new_id
from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import (
    Db,
    api_for,
    holding,
    process_logged,
    spawn_worker,
    until,
    worker_pid,
)
from tests.faults.harness_ext import start_workers as start_more_workers
from tests.procs import descendants
from tether.store.schema import HANDED_BACK

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

HOLD_THEN_RECOVER = {"attempt1": {"emit": 2, "sleep": 300}, "attempt2": {"emit": 2}}


def exited(pid: int) -> bool:
    """Gone, or a zombie its new parent has not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in {"Z", "X"}


async def test_worker_processes_whose_parent_is_killed_hand_their_runs_back_and_exit(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url)  # shutdown grace 10 s
    _, base = cluster.start_gateway()
    worker = spawn_worker(cluster, processes=2)
    await until(lambda: worker.log().count("Worker process is ready") == 2, 60, "both processes")
    children = descendants(worker.pid)
    assert len(children) == 2, children
    db = Db(fresh_db)
    invocation_id = new_id()
    async with api_for(base) as api:
        body = {"id": invocation_id, "input": HOLD_THEN_RECOVER, "background": True}
        assert (await api.post(body))[0] == 202
        await until(lambda: db.all_match([invocation_id], holding(3)), 30, "the run to hold")
        runner = worker_pid(db.row(invocation_id))
        assert runner in children

        os.kill(worker.pid, signal.SIGKILL)
        worker.popen.wait(10)
        await until(lambda: all(exited(pid) for pid in children), 60, "the orphans to exit")

        assert worker.log().count("is gone; stopping gracefully") == 2
        assert process_logged([worker], runner, "handed 1 unfinished attempts back")
        row = db.row(invocation_id)
        if row["status"] == "active":  # handed back, not lost: the next reaper replaces it
            assert row["heartbeat_at"] == HANDED_BACK and row["attempt"] == 1, row
        else:  # the other orphan, still stopping, ran a reaper pass after the hand-back
            assert row["status"] == "queued", row
            assert "attempt 1 handed back by its stopping worker" in worker.log()
        start_more_workers(cluster, 1)
        await until(lambda: db.row(invocation_id)["status"] == "completed", 30, "recovery")
        _, state = await api.get(invocation_id)
        assert state["attempt"] == 2 and state["output"]["recovered"] is True, state


async def test_worker_processes_write_their_log_lines_themselves(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    """Not through Dramatiq's relay (a pipe its main process reads and copies line by line):
    with the main process stopped, a run's lines still reach the log."""
    cluster = make_cluster(fresh_db, redis_url)
    _, base = cluster.start_gateway()
    worker = spawn_worker(cluster, processes=1)
    await until(lambda: "Worker process is ready" in worker.log(), 60, "the worker process")
    db = Db(fresh_db)
    invocation_id = new_id()
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        async with api_for(base) as api:
            body = {"id": invocation_id, "input": {"attempt1": {"emit": 1}}, "background": True}
            assert (await api.post(body))[0] == 202
            await until(lambda: db.row(invocation_id)["status"] == "completed", 30, "the run")
        await until(lambda: f"invocation {invocation_id}: completed" in worker.log(), 10, "log")
        assert f"invocation {invocation_id}: attempt 1 started" in worker.log()
    finally:
        os.kill(worker.pid, signal.SIGCONT)


async def test_worker_processes_log_at_the_configured_level(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    """``log_level`` is the worker processes' too: at WARNING one writes no INFO line (a run's,
    Dramatiq's), and still a failed handler's error. Dramatiq's main process, which runs none of
    Tether's code, still says it boots."""
    cluster = make_cluster(fresh_db, redis_url)
    cluster.env_overrides["TETHER_LOG_LEVEL"] = "WARNING"
    _, base = cluster.start_gateway()
    worker = spawn_worker(cluster, processes=1)
    db = Db(fresh_db)
    done, broken = new_id(), new_id()
    async with api_for(base) as api:
        for invocation_id, spec in ((done, {"emit": 1}), (broken, {"fail": True})):
            body = {"id": invocation_id, "input": {"attempt1": spec}, "background": True}
            assert (await api.post(body))[0] == 202
        await until(lambda: db.row(broken)["status"] == "failed", 60, "the failing run")
        await until(lambda: db.row(done)["status"] == "completed", 30, "the other run")
    await until(lambda: f"invocation {broken}: handler raised" in worker.log(), 10, "its error")
    lines = worker.log().splitlines()
    info = [line for line in lines if "[INFO]" in line and "[dramatiq.MainProcess]" not in line]
    assert info == [], info
