from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import MemoryJournal
from tether import AgentApp, InvocationContext
from tether.app import AppLoadError, load_app
from tether.events import InvalidEvent
from tether.jsonvalue import InvalidJson


class Sink(MemoryJournal):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, Any]] = []
        self.state: Any = None

    async def emit(self, event_type: str, data: Any) -> int:
        self.events.append((event_type, data))
        self.cursor = len(self.events) + 1
        return self.cursor

    async def save_checkpoint(self, state: Any) -> None:
        self.state = state

    def checkpoint(self) -> Any:
        return self.state


def ctx(sink: Sink, attempt: int = 1) -> InvocationContext:
    return InvocationContext(
        invocation_id="i", session_id=None, attempt=attempt, sink=sink, max_event_bytes=100
    )


async def test_emit_returns_the_cursor_and_checks_the_event() -> None:
    sink = Sink()
    c = ctx(sink)
    assert await c.emit({"type": "status", "message": "hi"}) == 2
    for bad in (
        {"type": "run.started"},
        {"type": "a b"},
        {"type": "x" * 65},
        {"type": "x\n"},  # '$' matches before a final newline: the SSE frame's event line broke
        {"message": 1},
        "status",
    ):
        with pytest.raises(InvalidEvent):
            await c.emit(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidJson):
        await c.emit({"type": "t", "v": float("nan")})
    with pytest.raises(ValueError, match="larger"):
        await c.emit({"type": "t", "v": "x" * 200})
    assert len(sink.events) == 1


async def test_checkpoints_round_trip_and_recovery_is_flagged() -> None:
    sink = Sink()
    await ctx(sink).save_checkpoint({"step": 2})
    again = ctx(sink, attempt=2)
    assert again.is_recovery and again.load_checkpoint() == {"step": 2}
    with pytest.raises(InvalidJson):
        await again.save_checkpoint({"bad": float("inf")})


def test_handlers_per_attempt() -> None:
    app = AgentApp()

    @app.invoke
    async def run(input: Any, ctx: InvocationContext) -> Any:
        return input

    assert app.handler_for(False) is run and app.handler_for(True) is None


def test_load_app_from_a_module_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "myagent.py").write_text(
        "from shared import AgentApp\napp = AgentApp()\n"
        "@app.invoke\nasync def f(i, c):\n    return i\nnot_app = 3\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert load_app("myagent:app").invoke_handler is not None
    for spec, message in (
        ("myagent", "module:attribute"),
        ("nosuch:app", "cannot import"),
        ("myagent:nope", "no attribute"),
        ("myagent:not_app", "not an AgentApp"),
    ):
        with pytest.raises(AppLoadError, match=message):
            load_app(spec)
