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
