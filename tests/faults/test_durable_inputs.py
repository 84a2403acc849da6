"""Resolving a wait under faults (real gateway and worker processes on PostgreSQL and Redis).

Whatever dies while an input is resolved, the parked invocation resumes exactly once: one
``run.resumed``, one attempt that replays the input, the steps before the wait never again.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.client import Api, SseEvent, assert_clean_log, new_id
from tests.faults.conftest import MakeCluster
from tests.faults.durable_app import read_effects
from tests.faults.harness_ext import (
    Db,
    api_for,
    owner_of,
    start_workers,
    until,
    worker_pid,
)
from tests.harness import Proc

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

APP = "tests.faults.durable_app:app"
CLAIM_BLOCKED = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'
  AND query LIKE '%%INSERT INTO tether_tenant_passes%%'
"""
"""The backend of a worker whose claim waits for a row lock on its tenant's pass: the claim's
last write (one statement, its rows a ``WITH`` ahead of the ``INSERT``), after it flipped the
invocation to ``active`` (uncommitted)."""


async def parked(api: Api, effects: Path, **spec: Any) -> str:
    invocation_id = new_id()
    body = {"id": invocation_id, "input": {"effects": str(effects), "wait": "approve", **spec}}
    status, _ = await api.post({**body, "background": True})
    assert status == 202
    state = await api.wait_status(invocation_id, {"waiting"})
    assert [w["wait"] for w in state["waiting_for"]] == ["approve"]
    return invocation_id


def kill(proc: Proc) -> None:
    proc.signal(signal.SIGKILL)
    proc.popen.wait(10)


def resumed_once(events: list[SseEvent]) -> None:
    assert_clean_log(events)
    types = Counter(e.type for e in events)
    assert types["run.waiting"] == 1 and types["run.resumed"] == 1, types
    assert events[-1].type == "run.completed"


async def test_a_worker_killed_mid_claim_of_the_resumed_run_leaves_it_to_the_reaper(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, tmp_path: Path
) -> None:
    cluster = make_cluster(fresh_db, redis_url, app=APP)
    _, base = cluster.start_gateway()
    [first] = start_workers(cluster, 1)
    db, effects = Db(fresh_db), tmp_path / "effects.log"
    async with api_for(base) as api:
        invocation_id = await parked(api, effects)
        kill(first)  # no worker at all while the input is resolved
        status, body = await api.send_input(invocation_id, "approve", {"ok": 1})
        assert status == 200 and body["status"] == "queued", body

        with psycopg.connect(db.dsn) as lock:  # the test holds the tenant's pass: the claim
            lock.execute(  # flips the row, then waits to store the pass
                "SELECT 1 FROM tether_tenant_passes WHERE tenant = "
                "(SELECT tenant FROM tether_invocations WHERE id = %s) FOR UPDATE",
                [invocation_id],
            )
            [claimer] = start_workers(cluster, 1)  # takes (and acknowledges) the message
            [blocked] = await until(lambda: db.query(CLAIM_BLOCKED), 30, "the blocked claim")
            kill(claimer)
            lock.rollback()
        await until(
            lambda: not db.query("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [blocked["pid"]]),
            30,
            "the dead worker's claim to roll back",
        )
        row = db.row(invocation_id)
        assert (row["status"], row["attempt"]) == ("queued", 1)  # the claim never committed

        [survivor] = start_workers(cluster, 1)
        done = await api.wait_status(invocation_id, {"completed", "failed"}, 45)
        events = await api.events(invocation_id)

    assert done["status"] == "completed" and done["attempt"] == 2, done
    assert done["output"]["value"] == {"ok": 1} and done["output"]["recovered"] is False
    resumed_once(events)
    # the message was lost with the killed worker: the survivor's periodic claim pass (or the
    # reaper's re-enqueue) took the still-queued run
    assert [(key.rsplit("/", 1)[-1], n) for key, n, _ in read_effects(str(effects))] == [
        ("charge", 1),
        ("ship", 2),
    ]


async def test_a_worker_killed_in_the_resumed_run_is_replaced_and_replays_the_input(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, tmp_path: Path
) -> None:
    cluster = make_cluster(fresh_db, redis_url, app=APP)
    _, base = cluster.start_gateway()
    workers = start_workers(cluster, 2)
    db, effects = Db(fresh_db), tmp_path / "effects.log"
    async with api_for(base) as api:
        invocation_id = await parked(api, effects, hold="in_ship")
        assert (await api.send_input(invocation_id, "approve", "yes"))[0] == 200
        await until(lambda: len(read_effects(str(effects))) == 2, 30, "the resumed run's step")
        pid = worker_pid(db.row(invocation_id))
        owner_of(pid, workers)
        os.kill(pid, signal.SIGKILL)

        done = await api.wait_status(invocation_id, {"completed", "failed"}, 45)
        events = await api.events(invocation_id)

    assert done["status"] == "completed" and done["attempt"] == 3, done
    output = done["output"]
    assert output["value"] == "yes" and output["recovered"] is True
    assert output["charge"]["attempt"] == 1 and output["ship"]["attempt"] == 3
    resumed_once(events)
    assert [e.data["attempt"] for e in events if e.type == "run.started"] == [1, 3]
    assert [e.data["attempt"] for e in events if e.type == "run.resumed"] == [2]
    ran = [(key.rsplit("/", 1)[-1], n, p) for key, n, p in read_effects(str(effects))]
    assert [(step, n) for step, n, _ in ran] == [("charge", 1), ("ship", 2), ("ship", 3)]
    assert ran[1][2] == pid != ran[2][2]  # the killed worker's ship, then the survivor's


async def test_many_concurrent_inputs_through_two_gateways_resume_the_run_once(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, tmp_path: Path
) -> None:
    cluster = make_cluster(fresh_db, redis_url, app=APP)
    _, base_a = cluster.start_gateway()
    _, base_b = cluster.start_gateway()
    start_workers(cluster, 1)
    async with api_for(base_a) as api_a, api_for(base_b) as api_b:
        api_b.owner = api_a.owner
        apis = [api_a, api_b]
        different = await parked(api_a, tmp_path / "a.log")
        same = await parked(api_a, tmp_path / "b.log")

        answers = await asyncio.gather(
            *(apis[i % 2].send_input(different, "approve", {"n": i}) for i in range(40)),
            *(apis[i % 2].send_input(same, "approve", "same") for i in range(40)),
        )
        by_value = answers[:40]
        winners = [i for i, (status, _) in enumerate(by_value) if status == 200]
        assert len(winners) == 1, [s for s, _ in by_value]
        assert Counter(s for s, _ in by_value) == {200: 1, 409: 39}
        assert {b["error"]["code"] for s, b in by_value if s == 409} == {"conflict"}
        assert {s for s, _ in answers[40:]} == {200}  # the same value again is idempotent

        for invocation_id, value in ((different, {"n": winners[0]}), (same, "same")):
            done = await api_b.wait_status(invocation_id, {"completed", "failed"}, 45)
            assert done["status"] == "completed" and done["attempt"] == 2, done
            assert done["output"]["value"] == value
            resumed_once(await api_a.events(invocation_id))
            for api in apis:  # the winning value, repeated later on either gateway: still 200
                assert (await api.send_input(invocation_id, "approve", value))[0] == 200
