"""The approval gate: a write/update/destructive tool parks the run until a human decides."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import PARKED, FakeSink, attempt
from tether.agents import (
    AgentRegistry,
    ApprovalPolicy,
    FunctionTool,
    LimitExceeded,
    Limits,
    ScriptedModel,
    build_agent_app,
    create_agent,
    denial_text,
    load_agents_dir,
    tool,
)
from tether.agents.approvals import DEFAULT_TIMEOUT_S, approval_id
from tether.agents.definitions import AgentDefinition
from tether.agents.types import ToolAnnotations, ToolEffect
from tether.app import AgentApp
from tether.durable import MAX_WAIT_SECONDS, WAIT_NAME
from tether.store.journal import Resolution, WaitKind

DENIED = "Tool execution denied by user approval gate (tool: delete_file)."


class Tools:
    """A destructive, a write and a read tool that count their runs."""

    def __init__(self, effect: ToolEffect | None = "destructive") -> None:
        self.runs: Counter[str] = Counter()
        runs = self.runs

        @tool(effect=effect)
        async def delete_file(path: str) -> str:
            """Delete a file."""
            runs[path] += 1
            return f"deleted {path}"

        @tool(effect="read")
        def list_files() -> list[str]:
            """List the files."""
            runs["list"] += 1
            return ["a.txt"]

        @tool
        def ping() -> str:
            """No declared effect."""
            runs["ping"] += 1
            return "pong"

        self.delete_file, self.list_files, self.ping = delete_file, list_files, ping

    def all(self) -> list[FunctionTool]:
        return [self.delete_file, self.list_files, self.ping]


def calls(*names_and_args: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "args": a} for n, a in names_and_args]}


DELETE_A = calls(("delete_file", {"path": "a.txt"}))


def janitor(tools: Tools, *turns: Any, **options: Any) -> tuple[AgentDefinition, ScriptedModel]:
    model = ScriptedModel.of(*(turns or (DELETE_A, "Result: {result}")))
    return create_agent("janitor", "Clean up.", model=model, tools=tools.all(), **options), model


def app_of(*agents: AgentDefinition, **registry: Any) -> AgentApp:
    return build_agent_app(AgentRegistry.of(agents, **registry))


def only_wait(sink: FakeSink) -> str:
    """The name of the one wait the run is parked on."""
    (wait,) = [w for w in sink.waits.values() if not w.resolved]
    return wait.name


async def test_a_destructive_tool_waits_for_approval_then_runs_once() -> None:
    tools = Tools()
    agent, model = janitor(tools)
    app, sink = app_of(agent), FakeSink()

    assert await attempt(app, "clean", sink) == PARKED
    assert tools.runs == {} and len(model.requests) == 1
    ((wait,),) = sink.parks
    assert wait.name == approval_id("inv-1", "janitor#t0.c0") and WAIT_NAME.match(wait.name)
    assert wait.kind is WaitKind.INPUT and wait.wake_in == DEFAULT_TIMEOUT_S == 3600
    shown = {
        "approval_id": wait.name,
        "call_id": "call_0_0",
        "tool_name": "delete_file",
        "args": {"path": "a.txt"},
        "annotations": {"effect": "destructive"},
        "agent": "janitor",
        "agent_path": ["janitor"],
    }
    assert wait.details == {**shown, "prompt": wait.details["prompt"]}
    assert "janitor" in wait.details["prompt"] and "delete_file" in wait.details["prompt"]
    assert sink.of_type("approval.pending") == [{"type": "approval.pending", **shown}]

    sink.resolve(wait.name, {"decision": "approve"})
    result = await attempt(app, "clean", sink, 2)
    assert tools.runs == {"a.txt": 1}
    assert len(model.requests) == 2  # the first turn was replayed, not asked again
    assert model.requests[-1].messages[-1].content == "deleted a.txt"
    assert result["text"] == "Result: deleted a.txt"
    [resolved] = sink.of_type("approval.resolved")
    assert resolved == {
        "type": "approval.resolved",
        "approval_id": wait.name,
        "call_id": "call_0_0",
        "tool_name": "delete_file",
        "agent": "janitor",
        "decision": "approve",
        "reason": "user",
    }
    order = [e["type"] for e in sink.events if e["type"].startswith(("tool", "approval"))]
    assert order == ["tool_call", "approval.pending", "approval.resolved", "tool_result"]


async def test_a_denied_tool_never_runs_and_the_model_reads_the_denial() -> None:
    tools = Tools()
    agent, model = janitor(tools)
    app, sink = app_of(agent), FakeSink()
    assert await attempt(app, "clean", sink) == PARKED
    sink.resolve(only_wait(sink), {"decision": "deny"})

    result = await attempt(app, "clean", sink, 2)
    assert tools.runs == {}
    assert denial_text("delete_file") == DENIED
    assert model.requests[-1].messages[-1].content == DENIED
    assert result["text"] == f"Result: {DENIED}"
    [outcome] = sink.of_type("tool_result")
    assert outcome["result"] == DENIED and "error" not in outcome
    [resolved] = sink.of_type("approval.resolved")
    assert (resolved["decision"], resolved["reason"]) == ("deny", "user")


async def test_a_run_nobody_can_be_asked_in_denies_gated_calls_at_once() -> None:
    """``approvals: "deny"`` (what /api/agents/invocations sends: a gated MCP tool is known only
    when the run lists it) denies without parking, on every attempt alike."""
    tools = Tools()
    agent, model = janitor(tools)
    app, sink = app_of(agent), FakeSink()
    value = {"messages": "clean", "approvals": "deny"}
    result = await attempt(app, value, sink)
    assert result["text"] == f"Result: {DENIED}" and tools.runs == {}
    assert sink.waits == {} and sink.of_type("approval.pending") == []
    [resolved] = sink.of_type("approval.resolved")
    assert (resolved["decision"], resolved["reason"]) == ("deny", "not_asked")


async def test_no_decision_before_the_timeout_is_a_deny_with_reason_timeout() -> None:
    tools = Tools()
    agent, model = janitor(tools)
    app, sink = app_of(agent), FakeSink()
    assert await attempt(app, "clean", sink) == PARKED
    sink.resolve(only_wait(sink), None, Resolution.TIMEOUT)

    result = await attempt(app, "clean", sink, 2)
    assert tools.runs == {} and result["text"] == f"Result: {DENIED}"
    [resolved] = sink.of_type("approval.resolved")
    assert (resolved["decision"], resolved["reason"]) == ("deny", "timeout")


@pytest.mark.parametrize(
    "value",
    [
        "approve",
        {"decision": "APPROVE"},
        {"decision": "approved"},
        {"decision": True},
        {"approve": True},
        {},
        None,
        ["approve"],
    ],
)
async def test_a_value_that_is_not_a_decision_denies_and_never_approves(value: Any) -> None:
    tools = Tools()
    agent, _ = janitor(tools)
    app, sink = app_of(agent), FakeSink()
    assert await attempt(app, "clean", sink) == PARKED
    sink.resolve(only_wait(sink), value)

    await attempt(app, "clean", sink, 2)
    assert tools.runs == {}
    [resolved] = sink.of_type("approval.resolved")
    assert (resolved["decision"], resolved["reason"]) == ("deny", "invalid_decision")


async def test_extra_keys_beside_an_approve_decision_are_ignored() -> None:
    tools = Tools()
    agent, _ = janitor(tools)
    app, sink = app_of(agent), FakeSink()
    assert await attempt(app, "clean", sink) == PARKED
    sink.resolve(only_wait(sink), {"decision": "approve", "note": "checked by bob"})
    await attempt(app, "clean", sink, 2)
    assert tools.runs == {"a.txt": 1}


async def test_a_sub_agents_destructive_tool_is_gated_and_the_request_names_that_agent() -> None:
    tools = Tools()
    child, child_model = janitor(tools)
    parent_model = ScriptedModel.of(
        calls(("agent-janitor", {"input": "delete a.txt"})), "Parent: {result}"
    )
    parent = create_agent("planner", model=parent_model, agents=[child])
    app, sink, value = app_of(parent), FakeSink(), {"agent": "planner", "messages": "go"}

    assert await attempt(app, value, sink) == PARKED
    [pending] = sink.of_type("approval.pending")
    assert pending["agent"] == "janitor" and pending["agent_path"] == ["planner", "janitor"]
    assert pending["approval_id"] == approval_id("inv-1", "planner#t0.c0/janitor#t0.c0")
    assert only_wait(sink) == pending["approval_id"]

    sink.resolve(pending["approval_id"], {"decision": "approve"})
    result = await attempt(app, value, sink, 2)
    assert result["text"] == "Parent: Result: deleted a.txt"
    assert tools.runs == {"a.txt": 1}
    assert len(parent_model.requests) == 2 and len(child_model.requests) == 2


async def test_every_resumed_attempt_replays_turns_and_calls_without_calling_them_again() -> None:
    tools = Tools()
    agent, model = janitor(
        tools,
        calls(("list_files", {}), ("delete_file", {"path": "a.txt"})),
        calls(("delete_file", {"path": "b.txt"}), ("ping", {})),
        "Cleaned: {result}",
    )
    app, sink = app_of(agent), FakeSink()

    assert await attempt(app, "clean", sink) == PARKED  # list_files ran; a.txt waits
    sink.resolve(only_wait(sink), {"decision": "approve"})
    assert await attempt(app, "clean", sink, 2) == PARKED  # a.txt ran; b.txt waits
    first, second = (w.name for w in sink.waits.values())
    assert first != second
    sink.resolve(second, {"decision": "deny"})
    result = await attempt(app, "clean", sink, 3)

    assert result["text"] == "Cleaned: pong"
    assert tools.runs == {"list": 1, "a.txt": 1, "ping": 1}  # b.txt denied, nothing twice
    assert len(model.requests) == 3  # one request per turn over three attempts
    assert len(sink.of_type("tool_call")) == len(sink.of_type("tool_result")) == 4
    assert len(sink.of_type("approval.pending")) == len(sink.of_type("approval.resolved")) == 2
    tool_messages = [m["content"] for m in result["messages"] if m["role"] == "tool"]
    assert tool_messages == ['["a.txt"]', "deleted a.txt", denial_text("delete_file"), "pong"]


async def test_tools_that_only_read_or_declare_no_effect_are_never_gated() -> None:
    tools = Tools()
    agent, _ = janitor(tools, calls(("list_files", {}), ("ping", {})), "ok")
    sink = FakeSink()
    result = await attempt(app_of(agent), "go", sink)
    assert result["text"] == "ok" and tools.runs == {"list": 1, "ping": 1}
    assert sink.parks == [] and sink.of_type("approval.pending") == []


@pytest.mark.parametrize(
    "annotations",
    [
        ToolAnnotations(effect="write"),
        ToolAnnotations(effect="update"),
        ToolAnnotations(effect="destructive"),
        ToolAnnotations(destructive=True),
        ToolAnnotations(effect="read", destructive=True),
    ],
)
async def test_write_update_destructive_and_legacy_destructive_tools_are_gated(
    annotations: ToolAnnotations,
) -> None:
    tools = Tools()
    tools.delete_file = dataclasses.replace(tools.delete_file, annotations=annotations)
    agent, _ = janitor(tools)
    sink = FakeSink()
    assert await attempt(app_of(agent), "clean", sink) == PARKED
    assert tools.runs == {}


async def test_with_require_for_destructive_off_nothing_waits() -> None:
    tools = Tools()
    agent, _ = janitor(tools)
    sink = FakeSink()
    app = app_of(agent, approval=ApprovalPolicy(require_for_destructive=False))
    result = await attempt(app, "clean", sink)
    assert result["text"] == "Result: deleted a.txt" and tools.runs == {"a.txt": 1}
    assert sink.parks == [] and sink.of_type("approval.pending") == []


async def test_a_denied_call_still_uses_up_the_tool_budget() -> None:
    tools = Tools()
    agent, _ = janitor(tools, DELETE_A, calls(("ping", {})), "never")
    app, sink = app_of(agent, limits=Limits(max_tool_calls=1)), FakeSink()
    assert await attempt(app, "clean", sink) == PARKED
    sink.resolve(only_wait(sink), {"decision": "deny"})
    with pytest.raises(LimitExceeded):
        await attempt(app, "clean", sink, 2)
    assert tools.runs == {}


def test_the_approval_id_is_stable_and_unique_per_invocation_and_call() -> None:
    one = approval_id("inv-1", "janitor#t0.c0")
    assert one == approval_id("inv-1", "janitor#t0.c0")
    assert one != approval_id("inv-2", "janitor#t0.c0")
    assert one != approval_id("inv-1", "janitor#t0.c1")
    assert WAIT_NAME.match(one)


async def parked_timeout(agent: AgentDefinition, **registry: Any) -> float | None:
    sink = FakeSink()
    assert await attempt(app_of(agent, **registry), "clean", sink) == PARKED
    return sink.parks[0][0].wake_in


async def test_the_timeout_is_the_agents_own_else_the_policys() -> None:
    agent, _ = janitor(Tools(), approval_timeout_s=120)
    assert await parked_timeout(agent) == 120
    assert await parked_timeout(agent, approval=ApprovalPolicy(timeout_s=600)) == 120
    other, _ = janitor(Tools())
    assert await parked_timeout(other, approval=ApprovalPolicy(timeout_s=600)) == 600


@pytest.mark.parametrize("bad", [0.5, 0, -1, math.nan, math.inf])
def test_a_timeout_under_a_second_or_not_finite_is_replaced_by_the_default(
    bad: float, caplog: pytest.LogCaptureFixture
) -> None:
    assert ApprovalPolicy(timeout_s=bad).timeout_s == DEFAULT_TIMEOUT_S
    agent, _ = janitor(Tools(), approval_timeout_s=bad)
    assert agent.approval_timeout_s is None
    assert caplog.text.count("approval timeout") == 2


async def test_a_timeout_longer_than_a_durable_wait_is_the_longest_wait_not_a_failed_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A wait refuses a timeout over MAX_WAIT_SECONDS: taken as is, the run would fail at its
    first gated call."""
    assert ApprovalPolicy(timeout_s=1e12).timeout_s == MAX_WAIT_SECONDS
    agent, _ = janitor(Tools(), approval_timeout_s=1e10)
    assert agent.approval_timeout_s == MAX_WAIT_SECONDS
    assert await parked_timeout(agent) == MAX_WAIT_SECONDS
    assert caplog.text.count("longer than a durable wait") == 2


def test_markdown_agents_set_their_approval_timeout_in_front_matter(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name, approval in (("fast", "{timeout: 90}"), ("odd", "{timeout: ten, bogus: 1}")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "agent.md").write_text(
            f"---\nmodel: scripted\napproval: {approval}\n---\nClean up.\n"
        )
    registry = load_agents_dir(tmp_path)
    assert registry.agents["fast"].approval_timeout_s == 90
    assert registry.agents["odd"].approval_timeout_s is None  # a wrong type is dropped
    assert "approval.bogus" in caplog.text
