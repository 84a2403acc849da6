"""What a tool or a model can throw at a run without taking the server or the run down: a tool
that exits the process, raises CancelledError or another BaseException, a sync schema tool, a
NUL from the model."""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import pytest

from tests.agents.conftest import FakeSink, attempt
from tether.agents import (
    AgentRegistry,
    ScriptedModel,
    build_agent_app,
    create_agent,
    schema_tool,
    tool,
)
from tether.agents import tools as tools_module
from tether.agents.sync_tools import SyncToolThreads
from tether.app import AgentApp


def app_calling(*tools: Any, script: list[Any] | None = None) -> AgentApp:
    calls = [{"name": t.name} for t in tools]
    model = ScriptedModel.of(*(script or [{"tool_calls": calls}, "done"]))
    agent = create_agent("a", "A.", model=model, tools=list(tools))
    return build_agent_app(AgentRegistry.of([agent]))


def tool_errors(sink: FakeSink) -> list[str | None]:
    return [e.get("error") for e in sink.events if e["type"] == "tool_result"]


async def test_a_tool_that_exits_or_interrupts_fails_alone() -> None:
    @tool
    def quits() -> str:
        """Exits the process it runs in (a thread: the exit reaches the run)."""
        sys.exit(3)

    @tool
    async def interrupts() -> str:
        """Raises KeyboardInterrupt."""
        raise KeyboardInterrupt

    @tool
    async def cancels() -> str:
        """Raises CancelledError though nobody cancelled it."""
        raise asyncio.CancelledError

    class Abort(BaseException):  # a library's own kind, as pytest.fail() and gevent raise
        pass

    @tool
    async def aborts() -> str:
        """Raises a BaseException that is not an Exception."""
        raise Abort("the secret text")

    @tool
    def aborts_on_a_thread() -> str:
        """The same, from a sync tool."""
        raise Abort("the secret text")

    sink = FakeSink()
    tools = (quits, interrupts, cancels, aborts, aborts_on_a_thread)
    result = await attempt(app_calling(*tools), "go", sink)
    assert result["text"] == "done"
    assert tool_errors(sink) == [
        "Tool 'quits' failed.",
        "Tool 'interrupts' failed.",
        "Tool 'cancels' failed.",
        "Tool 'aborts' failed.",
        "Tool 'aborts_on_a_thread' failed.",
    ]


async def test_a_sync_schema_tool_runs_off_the_event_loop_and_its_timeout_holds() -> None:
    seen: list[int] = []
    release = threading.Event()

    def execute(args: dict[str, Any]) -> str:
        seen.append(threading.get_ident())
        release.wait(5)
        return "late"

    slow = schema_tool(
        "slow", "Slow.", {"type": "object", "properties": {}}, execute, timeout_s=0.2
    )
    sink = FakeSink()
    try:
        await attempt(app_calling(slow), "go", sink)
    finally:
        release.set()
    assert seen and seen[0] != threading.get_ident()
    [error] = tool_errors(sink)
    assert error is not None and "timed out after 0.2s and is still running" in error


@pytest.mark.parametrize("bad", ["nul\x00here", "half \ud800 a character"])
async def test_a_model_output_no_store_can_hold_is_stored_with_a_replacement(bad: str) -> None:
    """A NUL or a lone surrogate in the model's text or its tool call's arguments becomes U+FFFD:
    the turn is recorded and the run goes on."""

    @tool
    def echo(s: str) -> str:
        """Echoes."""
        return s

    script = [{"tool_calls": [{"name": "echo", "args": {"s": bad}}]}, bad]
    sink = FakeSink()
    result = await attempt(app_calling(echo, script=script), "go", sink)
    clean = bad.replace("\x00", "\ufffd").replace("\ud800", "\ufffd")
    assert result["text"] == clean
    assert [e["result"] for e in sink.events if e["type"] == "tool_result"] == [clean]


async def test_sync_tools_stuck_past_their_timeouts_hold_their_own_threads_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each stuck call keeps a daemon thread of its own, so a quick sync tool after them runs at
    once, in its own time; past the bound a call is refused with the reason, not queued."""
    monkeypatch.setattr(tools_module, "SYNC_TOOLS", SyncToolThreads(limit=3))  # this test's
    release = threading.Event()

    @tool(timeout_s=0.2)
    def stuck() -> str:
        """Hangs."""
        release.wait(10)
        return "late"

    @tool(timeout_s=5)
    def quick() -> str:
        """Answers."""
        return "quick"

    script = [{"tool_calls": [{"name": "stuck"}, {"name": "stuck"}, {"name": "quick"}]}, "done"]
    sink = FakeSink()
    try:
        await attempt(app_calling(stuck, quick, script=script), "go", sink)
        again = FakeSink()
        over = [{"tool_calls": [{"name": "stuck"}, {"name": "quick"}]}, "done"]
        await attempt(app_calling(stuck, quick, script=over), "go", again)
    finally:
        release.set()
    results = [(e.get("result"), e.get("error")) for e in sink.events if e["type"] == "tool_result"]
    assert [r for r, _ in results] == [None, None, "quick"]
    assert all("still running" in (e or "") for _, e in results[:2])
    [_, refused] = tool_errors(again)
    assert refused is not None and "could not start: 3 sync tool calls are still running" in refused


async def test_a_sync_call_frees_its_slot_before_its_caller_hears_back() -> None:
    """The caller's next call can take the slot at once: a thread's exit racing the awaiting task
    must not refuse it (a limit of 1 makes any leftover slot a refusal)."""
    threads = SyncToolThreads(limit=1)
    finish = threading.Event()

    def answer(n: int) -> int:
        finish.wait(5)
        return n

    for n in range(50):
        finish.set()
        assert await threads.run("answer", answer, n) == n
        assert threads.running == 0
        with pytest.raises(ValueError, match="bad"):
            await threads.run("fail", _fails)
        assert threads.running == 0


def _fails() -> None:
    raise ValueError("bad")


async def test_a_tool_error_no_store_can_hold_is_stored_with_a_replacement() -> None:
    """An error text is the outside's as much as a result is (an MCP server's ``isError``
    text, a JSON-RPC error message, a tool's own ToolError): a NUL in it failed the whole run
    with InvalidJson instead of reaching the model."""
    from tether.agents import ToolError

    @tool
    async def refuses() -> str:
        """Raises a ToolError holding a NUL."""
        raise ToolError("bad\x00thing")

    sink = FakeSink()
    result = await attempt(
        app_calling(refuses, script=[{"tool_calls": [{"name": "refuses"}]}, "{result}"]), "go", sink
    )
    assert tool_errors(sink) == ["bad\ufffdthing"]
    assert result["text"] == '{"error":"bad\ufffdthing"}'
