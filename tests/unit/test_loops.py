"""Every process runs on uvloop's loop where it is installed, asyncio's when asked."""

from __future__ import annotations

import asyncio
import gc

import pytest
import uvloop

from tether import loops


def test_uvloop_is_the_default_and_asyncio_can_be_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(loops.ENV, raising=False)
    assert loops.loop_factory() is uvloop.new_event_loop
    monkeypatch.setenv(loops.ENV, "asyncio")
    assert loops.loop_factory() is asyncio.new_event_loop


def test_an_unknown_loop_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loops.ENV, "trio")
    with pytest.raises(loops.UnknownLoop, match="TETHER_EVENT_LOOP must be one of uvloop, asyncio"):
        loops.loop_factory()


def test_run_runs_a_coroutine_on_the_chosen_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(loops.ENV, raising=False)

    async def kind() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert loops.run(kind()).startswith("uvloop")


def test_settling_the_heap_freezes_what_survives() -> None:
    try:
        loops.settle_heap()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_the_cli_refuses_an_unknown_loop_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether.cli import main

    monkeypatch.setenv(loops.ENV, "trio")
    assert main(["dev", "--db", ":memory:"]) == 2
    assert "TETHER_EVENT_LOOP must be one of uvloop, asyncio, not 'trio'" in capsys.readouterr().err


async def _redis_like_loop(sent: asyncio.Event, stop: asyncio.Event) -> None:
    """Until ``stop``: a command sent under ``wait_for``, as redis-py's async client sends each
    one."""

    async def send() -> None:  # done at its first step, like a small socket write
        sent.set()

    while not stop.is_set():
        await asyncio.wait_for(send(), 5)
        await asyncio.sleep(0)


async def test_cancel_and_wait_ends_a_loop_whose_wait_for_dropped_the_cancel() -> None:
    sent, stop = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(_redis_like_loop(sent, stop))
    await sent.wait()  # resumes before wait_for wakes: there a lone cancel() is lost on 3.11
    try:
        # each cancel lands only if it finds the loop outside the step where wait_for
        # completes: alone here that took up to 2 s of retries, on a loaded machine longer
        await asyncio.wait_for(loops.cancel_and_wait([task]), 20)
        assert task.cancelled()
    finally:  # a failing run ends the loop itself
        stop.set()
        await asyncio.wait({task}, timeout=20)


async def test_cancel_and_wait_retrieves_what_the_tasks_raised_and_skips_finished_ones() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    failed = asyncio.create_task(fails())
    await asyncio.sleep(0)
    sleeping = asyncio.create_task(asyncio.sleep(60))
    await loops.cancel_and_wait([failed, sleeping])
    assert sleeping.cancelled() and isinstance(failed.exception(), ValueError)
