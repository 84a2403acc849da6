"""The last review's findings on the agent runtime, pinned."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.agents.conftest import FakeSink, attempt
from tether.agents import (
    AgentRegistry,
    DefinitionError,
    Limits,
    ScriptedModel,
    build_agent_app,
    create_agent,
    load_agents_dir,
    tool,
)
from tether.agents.adapters.scripted import ScriptedTurn
from tether.agents.dispatch import normalize_result
from tether.context import InvocationContext
from tether.jsonvalue import dumps


@tool
def nul() -> str:
    """Returns a NUL."""
    return "before\x00after"


def test_a_nul_in_a_tool_result_is_stored_as_a_replacement_character() -> None:
    assert normalize_result("a\x00b", 100) == "a\ufffdb"
    assert "\x00" not in normalize_result({"x": "a\x00"}, 100)


async def test_a_run_whose_tool_returns_a_nul_completes() -> None:
    model = ScriptedModel([ScriptedTurn(tool_calls=(("nul", {}),)), ScriptedTurn("ok")])
    app = build_agent_app(AgentRegistry.of([create_agent("a", model=model, tools=[nul])]))
    sink = FakeSink()
    result = await attempt(app, "go", sink)
    assert result["text"] == "ok"
    [event] = sink.of_type("tool_result")
    assert event["result"] == "before\ufffdafter"


async def test_tool_arguments_past_the_cap_are_refused_with_an_error_the_model_reads() -> None:
    model = ScriptedModel(
        [ScriptedTurn(tool_calls=(("nul", {"x": "y" * 200}),)), ScriptedTurn("k")]
    )
    agent = create_agent("a", model=model, tools=[nul])
    app = build_agent_app(AgentRegistry.of([agent], limits=Limits(max_tool_argument_bytes=100)))
    sink = FakeSink()
    await attempt(app, "go", sink)
    [call] = sink.of_type("tool_call")
    assert "omitted" in call["args"]
    [result] = sink.of_type("tool_result")
    assert "too large" in result["error"]


async def test_tool_arguments_under_their_cap_but_past_the_event_cap_are_refused_alike() -> None:
    """The effective cap is the smaller one: a call whose ``tool_call`` event the server could
    not store is refused as too large (the model reads why), and the run goes on."""
    model = ScriptedModel(
        [ScriptedTurn(tool_calls=(("nul", {"x": "y" * 3000}),)), ScriptedTurn("k")]
    )
    app = build_agent_app(AgentRegistry.of([create_agent("a", model=model, tools=[nul])]))
    handler = app.handler_for(False)
    assert handler is not None
    sink = FakeSink()
    ctx = InvocationContext(
        invocation_id="inv-1", session_id=None, attempt=1, sink=sink, max_event_bytes=2000
    )
    result = await handler("go", ctx)
    assert result["text"] == "k"
    [call] = sink.of_type("tool_call")
    assert "omitted" in call["args"]
    [refused] = sink.of_type("tool_result")
    assert "too large" in refused["error"] and "events hold at most 2000" in refused["error"]
    whole = {"type": "tool_call", "callId": call["callId"], "name": "nul"}
    whole |= {"args": {"x": "y" * 3000}, "agent": "a"}
    assert f"their event would be {len(dumps(whole).encode())};" in refused["error"]


async def test_sub_agent_call_ids_never_collide_with_the_parents_and_name_their_agent() -> None:
    child = create_agent(
        "child",
        model=ScriptedModel([ScriptedTurn(tool_calls=(("nul", {}),)), ScriptedTurn("c")]),
        tools=[nul],
    )
    parent = create_agent(
        "parent",
        model=ScriptedModel(
            [ScriptedTurn(tool_calls=(("agent-child", {"input": "x"}),)), ScriptedTurn("p")]
        ),
        agents=[child],
    )
    sink = FakeSink()
    await attempt(build_agent_app(AgentRegistry.of([parent])), "go", sink)
    calls = sink.of_type("tool_call")
    ids = [c["callId"] for c in calls]
    assert len(set(ids)) == len(ids) == 2
    [forwarded] = [c for c in calls if c["name"] == "nul"]
    assert forwarded["agent"] == "child" and forwarded["callId"].startswith("parent#t0.c0/child")


def test_agent_folder_names_are_validated(tmp_path: Path) -> None:
    (tmp_path / "bad name").mkdir()
    (tmp_path / "bad name" / "agent.md").write_text("Hi")
    with pytest.raises(DefinitionError, match="folder name"):
        load_agents_dir(tmp_path)


def test_preflight_reports_an_agent_without_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABRICKS_SERVING_ENDPOINT_NAME", raising=False)
    registry = AgentRegistry.of([create_agent("lost")])
    assert any("no model configured" in p for p in registry.preflight())


async def test_a_sync_tool_past_its_timeout_is_reported_as_still_running() -> None:
    @tool(timeout_s=0.05)
    def slow() -> str:
        """Slow."""
        time.sleep(0.5)
        return "late"

    model = ScriptedModel([ScriptedTurn(tool_calls=(("slow", {}),)), ScriptedTurn("k")])
    app = build_agent_app(AgentRegistry.of([create_agent("a", model=model, tools=[slow])]))
    sink = FakeSink()
    await attempt(app, "go", sink)
    [result] = sink.of_type("tool_result")
    assert "still running" in result["error"]


def test_settings_set_limits_and_the_default_model_unless_code_did() -> None:
    from tether.settings import AgentSettings

    settings = AgentSettings(max_tool_calls=7, default_model="scripted")
    plain = AgentRegistry.of([create_agent("a")])
    plain.explicit_limits = False
    plain.apply_settings(settings)
    assert plain.limits.max_tool_calls == 7 and plain.default_model == "scripted"
    coded = AgentRegistry.of([create_agent("a")], limits=Limits(max_tool_calls=3))
    coded.apply_settings(settings)
    assert coded.limits.max_tool_calls == 3
