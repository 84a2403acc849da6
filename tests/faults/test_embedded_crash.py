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


async def test_a_restarted_dev_server_replaces_its_own_dead_attempts_at_once(
    tmp_path: Path,
) -> None:
    """stale_after is a minute: a run recovered within the test's deadline was recognised as
    the dead predecessor's (the new process holds the file's lock) and replaced at start."""
    timers = {**FAST_TIMERS, "TETHER_TIMERS__HEARTBEAT_INTERVAL": "2"}
    timers["TETHER_TIMERS__STALE_AFTER"] = "60"
    db_file = str(tmp_path / "tether.db")
    procs: list[Proc] = []
    try:
        first, base = start_dev(tmp_path, APP, timers, db=db_file)
        procs.append(first)
        ids = [new_id() for _ in range(3)]
        spec = {"attempt1": {"emit": 2, "sleep": 300}, "attempt2": {"emit": 2}}
        async with api_for(base) as api:
            for invocation_id in ids:
                body = {"id": invocation_id, "input": spec, "background": True}
                assert (await api.post(body))[0] == 202

            async def holding() -> bool:
                states = [(await api.get(i))[1] for i in ids]
                return all(s["status"] == "active" and s["last_event_id"] >= 3 for s in states)

            await until(holding, 30, "the runs to hold")
            owner = api.owner
        first.signal(signal.SIGKILL)
        first.popen.wait(10)

        second, base = start_dev(tmp_path, APP, timers, db=db_file)
        procs.append(second)
        async with api_for(base) as api:
            api.owner = owner

            async def completed() -> bool:
                states = [(await api.get(i))[1] for i in ids]
                return all(s["status"] == "completed" for s in states)

            await until(completed, 20, "the runs to be recovered, well before stale_after")
            for invocation_id in ids:
                _, state = await api.get(invocation_id)
                assert state["attempt"] == 2 and state["output"]["recovered"] is True
                events = await api.events(invocation_id)
                assert_clean_log(events)
                assert [e.data["attempt"] for e in events if e.type == "run.started"] == [1, 2]
        assert "3 attempts of an earlier tether dev on this file handed back" in second.log()
    except BaseException:
        for proc in procs:
            print(f"\n===== {proc.log_path.name} =====\n{proc.log()[-6000:]}")
        raise
    finally:
        hard_stop(procs)
