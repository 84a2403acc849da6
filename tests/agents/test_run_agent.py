"""``run_agent`` without a server (spec §7, cases A1–A10) and the CLI entry point."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tether.agents import (
    AgentInput,
    ScriptedModel,
    create_agent,
    run_agent,
    run_agent_command,
    supervisor_tools,
    tool,
)
from tether.agents.types import AgentEvent, Message, TurnItem, TurnOutcome

EXAMPLES = str(Path(__file__).parents[2] / "examples" / "agents")


@dataclass
class ReplayModel:
    """An adapter that yields fixed events on every turn and records what it was asked."""

    events: list[AgentEvent]
    name: str = "Replay"
    accepts_extensions: frozenset[str] = frozenset({"databricks.supervisor"})
    consumes_input_tools: bool = True
    requests: list[AgentInput] = field(default_factory=list)

    async def turn(self, request: AgentInput) -> AsyncGenerator[TurnItem, None]:
        self.requests.append(request)
        for event in self.events:
            yield event
        yield TurnOutcome("")


async def test_deltas_accumulate_and_every_event_is_kept() -> None:
    events = [
        {"type": "message_delta", "content": "a"},
        {"type": "thinking", "content": "t"},
        {"type": "message_delta", "content": "b"},
    ]
    result = await run_agent(create_agent("a", "Be brief.", model=ReplayModel(events)), "hi")
    assert result.text == "ab"
    assert result.events == events


async def test_a_message_event_replaces_the_text() -> None:
    events = [{"type": "message_delta", "content": "x"}, {"type": "message", "content": "final"}]
    result = await run_agent(create_agent("a", model=ReplayModel(events)), "hi")
    assert result.text == "final"


async def test_string_input_becomes_system_then_user_with_a_random_thread() -> None:
    model = ReplayModel([])
    agent = create_agent("a", "Be brief.", model=model)
    await run_agent(agent, "hello")
    await run_agent(agent, [{"role": "user", "content": "again"}])
    first, second = model.requests
    assert first.messages == [Message("system", "Be brief."), Message("user", "hello")]
    assert second.messages[1] == Message("user", "again")
    assert first.thread_id and first.thread_id != second.thread_id


async def test_hosted_tools_travel_in_extensions_not_tools() -> None:
    genie = supervisor_tools.genie_space("01AB", "NYC taxi")
    model = ReplayModel([])
    await run_agent(create_agent("a", model=model, tools=[genie]), "hi")
    [request] = model.requests
    assert request.tools == []
    assert request.extensions == {"databricks.supervisor": {"hostedTools": [genie.spec]}}


async def test_a_sub_agent_runs_on_its_own_messages_and_returns_its_text() -> None:
    child_model = ScriptedModel.of("child says {input}")
    helper = create_agent("helper", "Child prompt.", model=child_model)
    parent_model = ScriptedModel.of(
        {"tool_calls": [{"name": "agent-helper", "args": {"input": "q"}}]}, "parent: {result}"
    )
    result = await run_agent(create_agent("main", model=parent_model, agents=[helper]), "go")
    assert child_model.requests[0].messages == [
        Message("system", "Child prompt."),
        Message("user", "q"),
    ]
    assert [e for e in result.events if e["type"] == "tool_result"][0]["result"] == "child says q"
    assert result.text.endswith("parent: child says q")


async def test_an_unknown_tool_is_reported_to_the_model() -> None:
    model = ScriptedModel.of({"tool_calls": [{"name": "x"}]}, "ok")
    result = await run_agent(create_agent("a", model=model), "go")
    [tool_result] = [e for e in result.events if e["type"] == "tool_result"]
    assert tool_result["error"] == "Unknown tool: x"


async def test_an_abort_while_streaming_returns_the_partial_text() -> None:
    signal = asyncio.Event()

    async def stop_on_first(event: AgentEvent) -> None:
        signal.set()

    model = ScriptedModel.of("one two three")
    result = await run_agent(
        create_agent("a", model=model), "go", signal=signal, on_event=stop_on_first
    )
    assert result.text == "one "


async def test_function_tools_run_with_validated_arguments() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    model = ScriptedModel.of(
        {"tool_calls": [{"name": "add", "args": {"a": 2, "b": 3}}]}, "sum is {result}"
    )
    result = await run_agent(create_agent("a", model=model, tools=[add]), "go")
    assert result.text == "sum is 5"


def test_the_cli_prints_events_and_the_final_text() -> None:
    out = io.StringIO()
    assert run_agent_command(EXAMPLES, "greeter", "hi there", out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[-1] == "Hello! You said: hi there"
    assert '"message_delta"' in lines[0]


def test_the_cli_reports_an_unknown_agent(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_agent_command(EXAMPLES, "ghost", "hi", out=io.StringIO()) == 1
    assert 'Agent "ghost" not found' in capsys.readouterr().err


def test_the_planner_example_delegates_to_the_weather_agent() -> None:
    out = io.StringIO()
    assert run_agent_command(EXAMPLES, "planner", "Trip to Paris", out=out) == 0
    assert "sunny" in out.getvalue().splitlines()[-1]


async def test_the_standalone_runner_has_no_approval_gate() -> None:
    ran: list[str] = []

    @tool(effect="destructive")
    def wipe(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "wiped"

    model = ScriptedModel.of({"tool_calls": [{"name": "wipe", "args": {"path": "a"}}]}, "{result}")
    result = await run_agent(create_agent("a", model=model, tools=[wipe]), "go")
    assert result.text == "wiped" and ran == ["a"]
    assert not [e for e in result.events if e["type"].startswith("approval")]
