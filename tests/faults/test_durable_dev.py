"""`tether dev` stopped (SIGTERM or SIGKILL) while an invocation is parked, then started again on
the same SQLite file: the input still resumes it, a durable sleep still fires, and the steps
before the wait never run again."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.client import assert_clean_log, new_id
from tests.faults.conftest import FAILED
from tests.faults.durable_app import read_effects
from tests.faults.harness_ext import FAST_TIMERS, api_for, hard_stop, log_has
from tests.harness import Proc, start_dev

pytestmark = [pytest.mark.faults, pytest.mark.timeout(90)]

APP = "tests.faults.durable_app:app"
ENV = {**FAST_TIMERS, "TETHER_TIMERS__INLINE_SLEEP_MAX": "0.2"}
STOPS = [pytest.param(signal.SIGTERM, id="sigterm"), pytest.param(signal.SIGKILL, id="sigkill")]


class DevServer:
    """`tether dev` on one SQLite file, restartable; every process it started is stopped."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.db_file = str(workdir / "tether.db")
        self.procs: list[Proc] = []
        self.owner = f"user-{new_id()[:8]}@example.com"

    def start(self) -> str:
        proc, base = start_dev(self.workdir, APP, ENV, db=self.db_file)
        self.procs.append(proc)
        return base

    def stop(self, how: signal.Signals) -> None:
        proc = self.procs[-1]
        proc.signal(how)
        proc.popen.wait(30)

    @property
    def current(self) -> Proc:
        return self.procs[-1]


@pytest.fixture
def dev(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DevServer]:
    server = DevServer(tmp_path)
    yield server
    hard_stop(server.procs)
    if request.node.stash.get(FAILED, True):
        for proc in server.procs:
            print(f"\n===== {proc.log_path.name} =====\n{proc.log()[-6000:]}")


async def post_parked(base: str, owner: str, spec: dict[str, Any]) -> str:
    invocation_id = new_id()
    async with api_for(base) as api:
        api.owner = owner
        status, _ = await api.post({"id": invocation_id, "input": spec, "background": True})
        assert status == 202
        await api.wait_status(invocation_id, {"waiting"})
    return invocation_id


async def completed_once(base: str, owner: str, invocation_id: str) -> Any:
    async with api_for(base) as api:
        api.owner = owner
        done = await api.wait_status(invocation_id, {"completed", "failed"}, 30)
        events = await api.events(invocation_id)
    assert done["status"] == "completed", done
    assert_clean_log(events)
    assert Counter(e.type for e in events)["run.resumed"] == 1
    return done


@pytest.mark.parametrize("how", STOPS)
async def test_a_parked_invocation_resumes_with_input_after_dev_restarts(
    dev: DevServer, tmp_path: Path, how: signal.Signals
) -> None:
    effects = str(tmp_path / "effects.log")
    base = dev.start()
    invocation_id = await post_parked(base, dev.owner, {"effects": effects, "wait": "approve"})
    dev.stop(how)

    base = dev.start()
    async with api_for(base) as api:
        api.owner = dev.owner
        state = (await api.get(invocation_id))[1]
        assert state["status"] == "waiting" and state["waiting_for"][0]["wait"] == "approve"
        assert (await api.send_input(invocation_id, "approve", 7))[0] == 200
    done = await completed_once(base, dev.owner, invocation_id)

    assert done["output"]["value"] == 7 and done["attempt"] == 2
    assert [(key.rsplit("/", 1)[-1], n) for key, n, _ in read_effects(effects)] == [
        ("charge", 1),
        ("ship", 2),
    ]


@pytest.mark.parametrize("how", STOPS)
async def test_a_parked_durable_sleep_fires_after_dev_restarts(
    dev: DevServer, tmp_path: Path, how: signal.Signals
) -> None:
    effects = str(tmp_path / "effects.log")
    base = dev.start()
    invocation_id = await post_parked(base, dev.owner, {"effects": effects, "sleep": 3})
    dev.stop(how)

    base = dev.start()
    done = await completed_once(base, dev.owner, invocation_id)

    assert done["attempt"] == 2 and done["output"]["recovered"] is False
    assert log_has(dev.current, "timers resumed 1 parked invocation")  # the new process fired it
    assert [n for _, n, _ in read_effects(effects)] == [1, 2]
