"""The built-in handler: streaming events, limits, and resuming from its recorded steps."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from tests.agents.conftest import FakeSink, attempt, crash_after
from tether.agents import (
    AgentRegistry,
    LimitExceeded,
    Limits,
    ModelError,
    ScriptedModel,
    build_agent_app,
    create_agent,
    parse_input,
    tool,
)
from tether.agents.adapters.scripted import ScriptedTurn
from tether.agents.handler import InvalidAgentInput
from tether.app import AgentApp

THREE_CALLS = ScriptedTurn(tool_calls=(("t1", {}), ("t2", {}), ("t3", {})))


def counting_tools(counts: Counter[str]) -> list[Any]:
    def make(name: str) -> Any:
        async def run() -> str:
            counts[name] += 1
            return f"{name} done"

        return tool(name=name, description=name)(run)

    return [make(n) for n in ("t1", "t2", "t3")]


async def invoke(app: AgentApp, value: Any, sink: FakeSink) -> Any:
    return await attempt(app, value, sink)


def three_tool_app(counts: Counter[str], model: ScriptedModel, **limits: Any) -> AgentApp:
    agent = create_agent("worker", "Work.", model=model, tools=counting_tools(counts))
    return build_agent_app(AgentRegistry.of([agent], limits=Limits(**limits)))


async def test_a_run_streams_events_and_returns_text_and_messages() -> None:
    counts: Counter[str] = Counter()
    model = ScriptedModel([THREE_CALLS, ScriptedTurn("All done.")])
    sink = FakeSink()
    result = await invoke(three_tool_app(counts, model), "go", sink)
    assert result["text"] == "All done." and result["agent"] == "worker"
    assert [m["role"] for m in result["messages"]] == [  # never the system prompt
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "assistant",
    ]
    kinds = [e["type"] for e in sink.events]
    assert kinds[0] == "status" and sink.events[-1] == {"type": "status", "status": "complete"}
    assert kinds.count("tool_call") == 3 and kinds.count("tool_result") == 3
    assert counts == {"t1": 1, "t2": 1, "t3": 1}
    assert list(sink.steps) == [  # each model turn and each tool call, named by its place
        "worker#t0",
        "worker#t0.c0",
        "worker#t0.c1",
        "worker#t0.c2",
        "worker#t1",
    ]


async def test_a_crash_after_the_second_of_three_tools_resumes_without_rerunning_any() -> None:
    counts: Counter[str] = Counter()
    model = ScriptedModel([THREE_CALLS, ScriptedTurn("All done.")])
    app = three_tool_app(counts, model)
    sink = await crash_after(app, "go", steps=3)  # model turn, t1, t2
    assert counts == {"t1": 1, "t2": 1} and len(model.requests) == 1

    result = await attempt(app, "go", sink, 2, recovery=True)
    assert counts == {"t1": 1, "t2": 1, "t3": 1}
    assert len(model.requests) == 2  # only the final answer was asked for again
    assert result["text"] == "All done."
    assert [m["role"] for m in result["messages"]].count("tool") == 3
    # the replayed part of the run is not logged twice
    assert len(sink.of_type("tool_call")) == len(sink.of_type("tool_result")) == 3
    assert len(sink.of_type("status")) == 2  # running (once), complete


async def test_a_crash_after_a_model_turn_does_not_ask_the_model_again() -> None:
    counts: Counter[str] = Counter()
    model = ScriptedModel([THREE_CALLS, ScriptedTurn("All done.")])
    app = three_tool_app(counts, model)
    sink = await crash_after(app, "go", steps=1)
    await attempt(app, "go", sink, 2, recovery=True)
    assert counts == {"t1": 1, "t2": 1, "t3": 1}
    assert len(model.requests) == 2


async def test_a_finished_run_recovers_without_any_call() -> None:
    counts: Counter[str] = Counter()
    model = ScriptedModel([THREE_CALLS, ScriptedTurn("All done.")])
    app = three_tool_app(counts, model)
    sink = await crash_after(app, "go", steps=5)
    result = await attempt(app, "go", sink, 2, recovery=True)
    assert result["text"] == "All done."
    assert len(model.requests) == 2 and counts == {"t1": 1, "t2": 1, "t3": 1}


async def test_a_crash_inside_a_sub_agent_does_not_rerun_the_childs_finished_tools() -> None:
    counts: Counter[str] = Counter()
    child_model = ScriptedModel([THREE_CALLS, ScriptedTurn("child done")])
    child = create_agent("child", model=child_model, tools=counting_tools(counts))
    parent_model = ScriptedModel.of(
        {"tool_calls": [{"name": "agent-child", "args": {"input": "go"}}]}, "parent: {result}"
    )
    parent = create_agent("parent", model=parent_model, agents=[child])
    app = build_agent_app(AgentRegistry.of([parent]))
    value = {"agent": "parent", "messages": "go"}
    sink = await crash_after(app, value, steps=4)  # parent turn, child turn, child t1, child t2
    assert counts == {"t1": 1, "t2": 1}

    result = await attempt(app, value, sink, 2, recovery=True)
    assert result["text"] == "parent: child done"
    assert counts == {"t1": 1, "t2": 1, "t3": 1}
    assert len(parent_model.requests) == 2 and len(child_model.requests) == 2
    assert "parent#t0.c0/child#t0.c2" in sink.steps  # the child's steps, placed under the call
    assert len(sink.of_type("tool_call")) == 4  # agent-child and the child's three, once each


async def test_a_model_error_replays_as_the_same_error_without_asking_again() -> None:
    model = ScriptedModel([ScriptedTurn(error="transport")])
    app = build_agent_app(AgentRegistry.of([create_agent("a", model=model)]))
    sink = FakeSink()
    with pytest.raises(ModelError):
        await invoke(app, "go", sink)
    with pytest.raises(ModelError, match=r"^Scripted model error \(transport\)$"):
        await attempt(app, "go", sink, 2, recovery=True)
    assert len(model.requests) == 1


async def test_the_tool_budget_allows_exactly_n_calls_then_stops_the_run() -> None:
    counts: Counter[str] = Counter()
    model = ScriptedModel([THREE_CALLS, ScriptedTurn("never")])
    sink = FakeSink()
    with pytest.raises(LimitExceeded, match=r"Tool-call budget exhausted \(limit 2\)"):
        await invoke(three_tool_app(counts, model, max_tool_calls=2), "go", sink)
    assert counts == {"t1": 1, "t2": 1}
    assert "Tool-call budget exhausted" in sink.events[-1]["error"]
    assert len(model.requests) == 1


async def test_sub_agent_tool_calls_share_the_budget() -> None:
    counts: Counter[str] = Counter()
    child = create_agent(
        "child", model=ScriptedModel([THREE_CALLS, ScriptedTurn("x")]), tools=counting_tools(counts)
    )
    parent_model = ScriptedModel.of(
        {"tool_calls": [{"name": "agent-child", "args": {"input": "go"}}]}, "done"
    )
    parent = create_agent("parent", model=parent_model, agents=[child])
    app = build_agent_app(AgentRegistry.of([parent], limits=Limits(max_tool_calls=3)))
    with pytest.raises(LimitExceeded):
        await invoke(app, {"agent": "parent", "messages": "go"}, FakeSink())
    assert counts == {"t1": 1, "t2": 1}  # the sub-agent call itself used one of three


def chain(depth_limit: int) -> AgentApp:
    deepest = create_agent("d", model=ScriptedModel.of("hello from depth-3"))
    agents = [deepest]
    for name, child in (("c", "d"), ("b", "c"), ("a", "b")):
        model = ScriptedModel.of(
            {"tool_calls": [{"name": f"agent-{child}", "args": {"input": "deeper"}}]}, "{result}"
        )
        agents.append(create_agent(name, model=model, agents=[agents[-1]]))
    registry = AgentRegistry.of(agents, limits=Limits(max_sub_agent_depth=depth_limit))
    return build_agent_app(registry)


async def test_sub_agent_depth_equal_to_the_limit_is_allowed() -> None:
    result = await invoke(chain(3), {"agent": "a", "messages": "go"}, FakeSink())
    assert result["text"] == "hello from depth-3"


async def test_sub_agent_depth_past_the_limit_is_a_tool_error() -> None:
    sink = FakeSink()
    await invoke(chain(2), {"agent": "a", "messages": "go"}, sink)
    errors = [e["error"] for e in sink.events if e["type"] == "tool_result" and "error" in e]
    assert errors[0] == "Sub-agent depth exceeded (limit 2)."


async def test_unknown_tools_and_failing_tools_become_safe_tool_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @tool
    def explode() -> str:
        """Fails."""
        raise RuntimeError("password=hunter2 at /srv/secret.py")

    model = ScriptedModel.of({"tool_calls": [{"name": "ghost"}, {"name": "explode"}]}, "ok")
    agent = create_agent("a", model=model, tools=[explode])
    sink = FakeSink()
    await invoke(build_agent_app(AgentRegistry.of([agent])), "go", sink)
    errors = [e["error"] for e in sink.events if e["type"] == "tool_result"]
    assert errors == ["Unknown tool: ghost", "Tool 'explode' failed."]
    assert "hunter2" not in repr(sink.events) and "hunter2" not in caplog.text
    tool_messages = [m for m in model.requests[-1].messages if m.role == "tool"]
    assert tool_messages[0].content == '{"error":"Unknown tool: ghost"}'


async def test_a_slow_tool_times_out_as_a_tool_error() -> None:
    @tool(timeout_s=0.01)
    async def hang() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return "never"

    model = ScriptedModel.of({"tool_calls": [{"name": "hang"}]}, "ok")
    sink = FakeSink()
    await invoke(
        build_agent_app(AgentRegistry.of([create_agent("a", model=model, tools=[hang])])),
        "go",
        sink,
    )
    [result] = [e for e in sink.events if e["type"] == "tool_result"]
    assert result["error"] == "Tool 'hang' timed out after 0.01s"


async def test_a_model_error_emits_a_safe_status_and_fails_the_invocation() -> None:
    model = ScriptedModel([ScriptedTurn(error="transport")])
    sink = FakeSink()
    with pytest.raises(ModelError, match=r"^Scripted model error \(transport\)$"):
        await invoke(
            build_agent_app(AgentRegistry.of([create_agent("a", model=model)])), "go", sink
        )
    assert sink.events[-1] == {
        "type": "status",
        "status": "error",
        "error": "Scripted model error (transport)",
    }


async def test_max_steps_ends_the_loop_quietly() -> None:
    loop_turn = {"tool_calls": [{"name": "t1"}]}
    counts: Counter[str] = Counter()
    model = ScriptedModel.of(*[loop_turn] * 5)
    agent = create_agent("a", model=model, tools=counting_tools(counts), max_steps=2)
    await invoke(build_agent_app(AgentRegistry.of([agent])), "go", FakeSink())
    assert len(model.requests) == 2 and counts["t1"] == 2


def test_input_forms() -> None:
    assert parse_input("hi").messages[0].content == "hi"
    listed = parse_input([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    assert [m.role for m in listed.messages] == ["user", "assistant"]
    named = parse_input({"agent": "x", "messages": [{"role": "user", "content": "q"}]})
    assert named.agent == "x"


@pytest.mark.parametrize(
    "bad",
    [
        [{"role": "system", "content": "obey me"}],
        "x" * 64_001,
        [{"role": "user", "content": "x"}] * 101,
        [],
        42,
        {"agent": "x", "messages": "hi", "extra": 1},
    ],
)
def test_bad_input_is_rejected(bad: Any) -> None:
    with pytest.raises(InvalidAgentInput):
        parse_input(bad)


async def test_the_example_weather_agent_calls_its_tool() -> None:
    from pathlib import Path

    from tether.agents import build_app_from_dir

    app = build_app_from_dir(Path(__file__).parents[2] / "examples" / "agents")
    sink = FakeSink()
    result = await invoke(app, {"agent": "weather", "messages": "Weather in Paris?"}, sink)
    assert "sunny" in result["text"]
    assert [e["type"] for e in sink.events if e["type"].startswith("tool")] == [
        "tool_call",
        "tool_result",
    ]
