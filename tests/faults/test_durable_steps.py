"""A worker SIGKILLed on either side of a step's record (real gateway and worker processes).

The step's side effect is a line in a file (``tests/faults/durable_app.py``), keyed by
``ctx.step_key``; the record is the ``tether_steps`` row. Killed before the record commits, the
step runs again in the replacement with the same key (at least once: make external calls
idempotent with it). Killed after, the replacement replays the recorded value and never calls
the step's function again. Frozen instead, and thawed after its replacement, the old attempt's
late step record, events and park are all refused.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.client import Api, assert_clean_log, new_id
from tests.faults.conftest import MakeCluster
from tests.faults.durable_app import read_effects
from tests.faults.harness_ext import (
    Db,
    api_for,
    log_has,
    owner_of,
    start_workers,
    until,
    worker_pid,
)
from tests.harness import Proc

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

APP = "tests.faults.durable_app:app"


def recorded_steps(db: Db, invocation_id: str) -> dict[str, int]:
    """The steps recorded for an invocation: name -> the attempt that recorded it."""
    rows = db.query(
        "SELECT name, attempt FROM tether_steps WHERE invocation_id = %s", [invocation_id]
    )
    return {r["name"]: r["attempt"] for r in rows}


async def start_holding(api: Api, effects: Path, hold: str) -> str:
    invocation_id = new_id()
    spec = {"effects": str(effects), "hold": hold}
    status, _ = await api.post({"id": invocation_id, "input": spec, "background": True})
    assert status == 202
    return invocation_id


async def kill_its_worker(db: Db, invocation_id: str, doomed: Proc) -> int:
    """SIGKILL the worker process running the invocation (one of ours), once a survivor is up."""
    pid = worker_pid(db.row(invocation_id))
    assert owner_of(pid, [doomed]) is doomed
    os.kill(pid, signal.SIGKILL)
    return pid


async def finished(api: Api, invocation_id: str) -> Any:
    done = await api.wait_status(invocation_id, {"completed", "failed", "cancelled"}, 45)
    assert done["status"] == "completed", done
    events = await api.events(invocation_id)
    assert_clean_log(events)
    assert [e.data["attempt"] for e in events if e.type == "run.started"] == [1, 2]
    return done


async def test_a_step_killed_after_its_side_effect_runs_again_with_the_same_step_key(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, tmp_path: Path
) -> None:
    cluster = make_cluster(fresh_db, redis_url, app=APP)
    _, base = cluster.start_gateway()
    [doomed] = start_workers(cluster, 1)
    db, effects = Db(fresh_db), tmp_path / "effects.log"
    async with api_for(base) as api:
        invocation_id = await start_holding(api, effects, "in_charge")
        await until(lambda: read_effects(str(effects)), 30, "the charge step's side effect")
        start_workers(cluster, 1)  # the survivor
        assert recorded_steps(db, invocation_id) == {}  # the side effect happened, no record
        victim = await kill_its_worker(db, invocation_id, doomed)

        done = await finished(api, invocation_id)

    charges = [e for e in read_effects(str(effects)) if e[0] == done["output"]["charge"]["key"]]
    assert [(attempt, pid == victim) for _, attempt, pid in charges] == [(1, True), (2, False)]
    assert done["attempt"] == 2 and done["output"]["recovered"] is True
    assert done["output"]["charge"]["attempt"] == 2  # the run that finished is the one recorded
    assert recorded_steps(db, invocation_id) == {"charge": 2, "ship": 2}
    assert len(read_effects(str(effects))) == 3  # charge twice (same key), ship once


async def test_a_step_killed_after_its_record_committed_is_never_called_again(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, tmp_path: Path
) -> None:
    cluster = make_cluster(fresh_db, redis_url, app=APP)
    _, base = cluster.start_gateway()
    [doomed] = start_workers(cluster, 1)
    db, effects = Db(fresh_db), tmp_path / "effects.log"
    async with api_for(base) as api:
        invocation_id = await start_holding(api, effects, "after_charge")
        await until(lambda: "charge" in recorded_steps(db, invocation_id), 30, "the charge record")
        start_workers(cluster, 1)
        victim = await kill_its_worker(db, invocation_id, doomed)

        done = await finished(api, invocation_id)

    output = done["output"]
    assert output["charge"]["attempt"] == 1  # the recorded value, replayed
    assert output["ship"]["attempt"] == 2 and output["recovered"] is True
    [(charge_key, charge_attempt, charge_pid), (ship_key, ship_attempt, ship_pid)] = read_effects(
        str(effects)
    )
    assert (charge_key, charge_attempt) == (output["charge"]["key"], 1)
    assert (ship_key, ship_attempt) == (output["ship"]["key"], 2)
    assert charge_pid == victim != ship_pid
    assert recorded_steps(db, invocation_id) == {"charge": 1, "ship": 2}


async def test_a_frozen_attempt_that_finishes_its_step_after_being_replaced_changes_nothing(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, tmp_path: Path
) -> None:
    cluster = make_cluster(fresh_db, redis_url, app=APP)
    _, base = cluster.start_gateway()
    [frozen] = start_workers(cluster, 1)
    db, effects, go = Db(fresh_db), tmp_path / "effects.log", tmp_path / "go"
    async with api_for(base) as api:
        invocation_id = new_id()
        spec = {"effects": str(effects), "hold": "in_charge", "go": str(go), "wait": "approve"}
        assert (await api.post({"id": invocation_id, "input": spec, "background": True}))[0] == 202
        await until(lambda: read_effects(str(effects)), 30, "attempt 1's charge side effect")
        assert owner_of(worker_pid(db.row(invocation_id)), [frozen]) is frozen
        frozen.signal(signal.SIGSTOP)
        start_workers(cluster, 1)
        replaced = await api.wait_status(invocation_id, {"waiting"}, 45)  # re-charged, parked
        assert replaced["attempt"] == 2
        record, log = recorded_steps(db, invocation_id), db.events(invocation_id)

        go.touch()  # the frozen attempt's step returns as soon as it thaws
        frozen.signal(signal.SIGCONT)
        stopped = f"invocation {invocation_id}: attempt 1 stopped without finishing (superseded)"
        await until(lambda: log_has(frozen, stopped), 30, "the thawed attempt to stop")
        assert recorded_steps(db, invocation_id) == record == {"charge": 2}
        assert db.events(invocation_id) == log  # no late event, no late park
        assert (await api.get(invocation_id))[1]["status"] == "waiting"

        assert (await api.send_input(invocation_id, "approve", "ok"))[0] == 200
        done = await api.wait_status(invocation_id, {"completed", "failed"}, 45)

    assert done["status"] == "completed" and done["attempt"] == 3, done
    assert done["output"]["charge"]["attempt"] == 2  # the replacement's record, replayed
    assert [(key.rsplit("/", 1)[-1], n) for key, n, _ in read_effects(str(effects))] == [
        ("charge", 1),
        ("charge", 2),
        ("ship", 3),
    ]
    charged = [e["data"]["attempt"] for e in db.events(invocation_id) if e["type"] == "charged"]
    assert charged == [2]  # attempt 3 replayed past it without storing it again
