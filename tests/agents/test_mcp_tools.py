"""MCP servers' tools in agent runs, against a real MCP server (the SDK's) on 127.0.0.1.

Tools come with their annotations (a destructive one waits for approval), a call is a durable
step (a recovered run never sends it again), connections are pooled per server and closed at
shutdown, and a dead server is a tool error the model reads, not a failed run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.agents.conftest import PARKED, FakeSink, attempt, crash_after
from tests.agents.mcp_fixtures import McpTestServer
from tether.agents import (
    AgentRegistry,
    ApprovalPolicy,
    ScriptedModel,
    build_agent_app,
    create_agent,
)
from tether.agents.definitions import AgentDefinition
from tether.agents.mcp import McpConfig, McpHub, mcp_server
from tether.app import AgentApp

MakeApp = Callable[..., tuple[AgentApp, McpHub]]
NO_GATE = ApprovalPolicy(require_for_destructive=False)


def calls(name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args or {}}]}


def notes_agent(
    server: McpTestServer, *turns: Any, name: str = "a", **options: Any
) -> tuple[AgentDefinition, ScriptedModel]:
    model = ScriptedModel.of(*(turns or (calls("mcp.notes.list_notes"), "Notes: {result}")))
    agent = create_agent(
        name, "Keep notes.", model=model, mcp_servers=[mcp_server("notes", server.url)], **options
    )
    return agent, model


@pytest.fixture
async def make_app() -> AsyncIterator[MakeApp]:
    """Apps on hubs that admit loopback; every hub is closed before the MCP server stops."""
    hubs: list[McpHub] = []

    def make(
        *agents: AgentDefinition, approval: ApprovalPolicy | None = None, **config: Any
    ) -> tuple[AgentApp, McpHub]:
        hub = McpHub(McpConfig(**{"allow_localhost": True, **config}))
        hubs.append(hub)
        registry = AgentRegistry.of(agents, mcp=hub, approval=approval or ApprovalPolicy())
        return build_agent_app(registry), hub

    yield make
    for hub in hubs:
        await hub.aclose()


async def test_an_agent_is_offered_its_servers_tools_with_their_annotations(
    mcp_test_server: McpTestServer, make_app: MakeApp
) -> None:
    agent, model = notes_agent(mcp_test_server)
    app, _ = make_app(agent)
    result = await attempt(app, "what do I have?", FakeSink())
    offered = {t.name: t.annotations for t in model.requests[0].tools}
    assert {name: a.effect if a else None for name, a in offered.items()} == {
        "mcp.notes.add_note": "write",
        "mcp.notes.list_notes": "read",
        "mcp.notes.wipe": "destructive",
        "mcp.notes.boom": "destructive",  # MCP's default: a tool may destroy unless it says not
        "mcp.notes.slow": "read",
        "mcp.notes.unannotated": "destructive",
    }
    assert result["text"] == 'Notes: {"result":[]}'  # no text block: the structured content


async def test_a_servers_tools_can_be_limited_per_agent(
    mcp_test_server: McpTestServer, make_app: MakeApp
) -> None:
    model = ScriptedModel.of("hi")
    only = mcp_server("notes", mcp_test_server.url, tools=["list_notes"])
    agent = create_agent("a", model=model, mcp_servers=[only])
    other, other_model = notes_agent(mcp_test_server, "hi", name="b")
    app, _ = make_app(agent, other)
    await attempt(app, {"agent": "a", "messages": "hi"}, FakeSink())
    assert [t.name for t in model.requests[0].tools] == ["mcp.notes.list_notes"]
    await attempt(app, {"agent": "b", "messages": "hi"}, FakeSink())
    assert len(other_model.requests[0].tools) == 6  # each agent its own (REF-BUG 3 fixed)


async def test_agents_naming_one_server_differently_each_get_its_tools_under_their_name(
    mcp_test_server: McpTestServer, make_app: MakeApp
) -> None:
    """One URL, one pooled connection, two names: the second agent's listing is not the
    first's (it used to come back under the first name, and every tool was dropped)."""
    first, first_model = notes_agent(mcp_test_server, "hi", name="p")
    model = ScriptedModel.of(calls("mcp.trips.list_notes"), "Trips: {result}")
    trips = mcp_server("trips", mcp_test_server.url)
    second = create_agent("q", "Trips.", model=model, mcp_servers=[trips])
    app, _ = make_app(first, second)
    await attempt(app, {"agent": "p", "messages": "hi"}, FakeSink())
    mcp_test_server.notes.append("Lisbon")
    result = await attempt(app, {"agent": "q", "messages": "go"}, FakeSink())
    assert "mcp.trips.list_notes" in {t.name for t in model.requests[0].tools}
    assert result["text"] == "Trips: Lisbon"
    assert "mcp.notes.list_notes" in {t.name for t in first_model.requests[0].tools}


async def test_a_read_only_call_runs_once_and_is_a_step(
    mcp_test_server: McpTestServer, make_app: MakeApp
) -> None:
    mcp_test_server.notes.append("buy milk")
    agent, _ = notes_agent(mcp_test_server)
    app, _ = make_app(agent)
    sink = FakeSink()
    result = await attempt(app, "notes?", sink)
    assert result["text"] == "Notes: buy milk"
    assert mcp_test_server.calls == {"list_notes": 1}
    assert list(sink.steps) == ["a#mcp", "a#t0", "a#t0.c0", "a#t1"]


async def test_a_destructive_mcp_tool_waits_for_approval_then_runs_once(
    mcp_test_server: McpTestServer, make_app: MakeApp
) -> None:
    agent, _ = notes_agent(mcp_test_server, calls("mcp.notes.wipe"), "Result: {result}")
    app, _ = make_app(agent)
    sink = FakeSink()
    assert await attempt(app, "wipe it", sink) == PARKED
    assert mcp_test_server.calls == {}
    [pending] = sink.of_type("approval.pending")
    assert pending["tool_name"] == "mcp.notes.wipe"
    assert pending["annotations"] == {"effect": "destructive", "destructive": True}
    sink.resolve(pending["approval_id"], {"decision": "approve"})
    result = await attempt(app, "wipe it", sink, 2)
    assert result["text"] == "Result: wiped" and mcp_test_server.calls == {"wipe": 1}


async def test_a_recovered_run_never_sends_a_recorded_call_again(
    mcp_test_server: McpTestServer, make_app: MakeApp
) -> None:
    turns = (calls("mcp.notes.add_note", {"text": "hi"}), "Result: {result}")
    agent, _ = notes_agent(mcp_test_server, *turns)
    app, _ = make_app(agent, approval=NO_GATE)
    sink = await crash_after(app, "note it", steps=3)  # a#mcp, a#t0, a#t0.c0
    listings = mcp_test_server.rpc_methods().count("tools/list")
    result = await attempt(app, "note it", sink, 2, recovery=True)
    assert result["text"] == "Result: noted: hi"
    assert mcp_test_server.calls == {"add_note": 1}
    assert mcp_test_server.rpc_methods().count("tools/list") == listings  # replayed, not listed


async def test_a_dead_server_is_a_tool_error_the_model_reads(
    mcp_test_server: McpTestServer, make_app: MakeApp
) -> None:
    agent, _ = notes_agent(mcp_test_server, calls("mcp.notes.list_notes"), "Said: {result}")
    app, hub = make_app(agent)
    [server] = agent.mcp_servers
    assert len(await hub.list_tools(server)) == 6 and hub.open_servers() == ["notes"]
    mcp_test_server.stop()
    sink = FakeSink()
    result = await attempt(app, "notes?", sink)
    [outcome] = sink.of_type("tool_result")
    assert outcome["error"] in (
        "MCP server 'notes' did not answer the call to 'list_notes'.",
        "MCP server 'notes' is unavailable.",
    )
    assert result["text"].startswith("Said: ")
    assert sink.of_type("status")[-1] == {"type": "status", "status": "complete"}


async def test_a_server_down_at_the_start_leaves_the_agent_without_its_tools(
    mcp_test_server: McpTestServer, make_app: MakeApp, caplog: pytest.LogCaptureFixture
) -> None:
    mcp_test_server.stop()
    agent, model = notes_agent(mcp_test_server, calls("mcp.notes.list_notes"), "Said: {result}")
    app, _ = make_app(agent)
    sink = FakeSink()
    result = await attempt(app, "notes?", sink)
    assert model.requests[0].tools == []
    assert sink.of_type("tool_result")[0]["error"] == "Unknown tool: mcp.notes.list_notes"
    assert "MCP server 'notes' is unavailable" in caplog.text
    assert result["text"].startswith("Said: ")


async def test_an_error_result_is_the_servers_own_text(
    mcp_test_server: McpTestServer, make_app: MakeApp
) -> None:
    agent, _ = notes_agent(mcp_test_server, calls("mcp.notes.boom"), "Said: {result}")
    app, _ = make_app(agent, approval=NO_GATE)
    sink = FakeSink()
    await attempt(app, "boom", sink)
    [outcome] = sink.of_type("tool_result")
    assert "the notes store is read-only today" in outcome["error"]


async def test_connections_are_pooled_per_server_and_closed_on_shutdown(
    mcp_test_server: McpTestServer, make_app: MakeApp
) -> None:
    first, _ = notes_agent(mcp_test_server, name="first")
    second, _ = notes_agent(mcp_test_server, name="second")
    app, hub = make_app(first, second)
    for name in ("first", "second", "first"):
        await attempt(app, {"agent": name, "messages": "notes?"}, FakeSink())
    handshakes = [
        m for m in mcp_test_server.rpc_methods() if m in ("server/discover", "initialize")
    ]
    assert len(handshakes) == 1 and hub.open_servers() == ["notes"]
    await app.shutdown()
    assert hub.open_servers() == []


async def test_a_call_past_the_servers_timeout_is_a_tool_error_and_the_session_stays(
    mcp_test_server: McpTestServer, make_app: MakeApp
) -> None:
    model = ScriptedModel.of(calls("mcp.notes.slow"), calls("mcp.notes.list_notes"), "ok")
    server = mcp_server("notes", mcp_test_server.url, timeout_s=0.5)
    app, hub = make_app(create_agent("a", model=model, mcp_servers=[server]))
    sink = FakeSink()
    await attempt(app, "slow", sink)
    timed_out, listed = sink.of_type("tool_result")
    assert timed_out["error"] == "MCP tool 'slow' on server 'notes' timed out after 0.5s."
    assert "error" not in listed and hub.open_servers() == ["notes"]
