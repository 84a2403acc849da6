"""`tether dev` SIGKILLed mid-run and started again on the same SQLite file recovers the run."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.client import assert_clean_log, new_id
from tests.faults.harness_ext import FAST_TIMERS, api_for, hard_stop, until
from tests.harness import Proc, start_dev

pytestmark = [pytest.mark.faults, pytest.mark.timeout(90)]

APP = "tests.faults.app:app"


async def test_a_killed_dev_server_recovers_the_run_when_started_again_on_its_file(
    tmp_path: Path,
) -> None:
    db_file = str(tmp_path / "tether.db")
    procs: list[Proc] = []
    try:
        first, base = start_dev(tmp_path, APP, FAST_TIMERS, db=db_file)
        procs.append(first)
        invocation_id = new_id()
        spec = {"attempt1": {"emit": 2, "sleep": 300}, "attempt2": {"emit": 2}}
        async with api_for(base) as api:
            assert (await api.post({"id": invocation_id, "input": spec, "background": True}))[
                0
            ] == 202

            async def holding() -> bool:
                state = (await api.get(invocation_id))[1]
                return bool(state["status"] == "active" and state["last_event_id"] >= 3)

            await until(holding, 30, "the run to hold")
            owner = api.owner
        first.signal(signal.SIGKILL)
        first.popen.wait(10)

        second, base = start_dev(tmp_path, APP, FAST_TIMERS, db=db_file)
        procs.append(second)
        async with api_for(base) as api:
            api.owner = owner

            async def completed() -> bool:
                return bool((await api.get(invocation_id))[1]["status"] == "completed")

            await until(completed, 30, "the run to be recovered")
            _, state = await api.get(invocation_id)
            assert state["attempt"] == 2 and state["output"]["recovered"] is True
            events = await api.events(invocation_id)
            assert_clean_log(events)
            assert [e.data["attempt"] for e in events if e.type == "run.started"] == [1, 2]
    except BaseException:
        for proc in procs:
            print(f"\n===== {proc.log_path.name} =====\n{proc.log()[-6000:]}")
        raise
    finally:
        hard_stop(procs)
