"""Skills and MCP through the server's seams: the gateway's ``/api/agents`` routes (a forced
skill, the skills in ``/info``), the input check, and the caller's credentials reaching an MCP
``tools/call`` from ``ctx.request_auth``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.agents.agent_server import ALICE, Counter, serve
from tests.agents.conftest import FakeSink
from tests.agents.mcp_fixtures import McpTestServer
from tests.agents.skill_fixtures import write_skill
from tether import InputCheck, InvocationContext
from tether.agents import (
    AgentRegistry,
    ApprovalPolicy,
    ScriptedModel,
    build_agent_app,
    create_agent,
    load_agents_dir,
)
from tether.agents.mcp import McpConfig, McpHub, mcp_server
from tether.credentials import UserCredential, WorkspaceAuth

SP, USER = "Bearer service-principal", "Bearer alice-token"


async def service() -> str:
    return SP


def skilled(tmp_path: Path, counter: Counter) -> AgentRegistry:
    write_skill(tmp_path / "skills", "pdf", description="Fill PDFs", body="PDF steps.")
    chat = create_agent("chat", "Chat.", model=counter, default=True, skills=["pdf"])
    return load_agents_dir(tmp_path / "none", code_agents=[chat], skills_dir=tmp_path / "skills")


async def test_a_chat_turn_can_force_a_skill_and_info_lists_the_skills(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    counter = Counter()
    client = await serve(aiohttp_client, tmp_path, build_agent_app(skilled(tmp_path, counter)))

    async def chat(body: dict[str, Any]) -> None:
        r = await client.post("/api/agents/chat", json=body, headers=ALICE)
        assert r.status == 200 and "response.completed" in await r.text()  # the whole stream

    await chat({"message": "fill it", "skill": "pdf"})
    prompt = counter.requests[-1].messages[0].content
    assert "## Available skills" in prompt and 'explicitly requested the "pdf" skill' in prompt
    await chat({"message": "/pdf fill it"})
    assert counter.requests[-1].messages[-1].content == "fill it"
    info = await (await client.get("/api/agents/info", headers=ALICE)).json()
    assert info["skills"] == {"chat": [{"name": "pdf", "description": "Fill PDFs"}]}
    bad = await client.post(
        "/api/agents/chat", json={"message": "x", "skill": "no spaces"}, headers=ALICE
    )
    assert bad.status == 422


async def test_a_skill_forced_on_an_agent_without_skills_is_logged_and_ignored(
    aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    counter = Counter()
    plain = create_agent("chat", "Chat.", model=counter, default=True)
    registry = AgentRegistry({"chat": plain}, default_agent="chat")
    client = await serve(aiohttp_client, tmp_path, build_agent_app(registry))
    r = await client.post("/api/agents/chat", json={"message": "hi", "skill": "pdf"}, headers=ALICE)
    assert r.status == 200 and "response.completed" in await r.text()
    assert "Agent 'chat': ignoring the requested skill: the agent has no skills" in caplog.text
    assert counter.requests[-1].messages[-1].content == "hi"


def user_auth(token: str) -> WorkspaceAuth:
    """The gateway's ``ctx.request_auth``, on a client that only authenticates."""
    client: Any = SimpleNamespace(
        config=SimpleNamespace(authenticate=lambda: {"Authorization": token})
    )
    return WorkspaceAuth(UserCredential("alice", token), factory=lambda _t: client)


async def test_workspace_mcp_calls_go_as_the_caller_from_ctx_request_auth(
    mcp_test_server: McpTestServer,
) -> None:
    workspace = McpConfig(
        allow_localhost=True, workspace_host="http://127.0.0.1", service_auth=service
    )
    turns = ({"tool_calls": [{"name": "mcp.ws.add_note", "args": {"text": "hi"}}]}, "{result}")
    agent = create_agent(
        "a",
        model=ScriptedModel.of(*turns),
        mcp_servers=[mcp_server("ws", mcp_test_server.url)],
    )
    plain = create_agent("plain", model=ScriptedModel.of("hi"))
    registry = AgentRegistry.of(
        [agent, plain],
        mcp=McpHub(workspace),
        approval=ApprovalPolicy(require_for_destructive=False),
    )
    app = build_agent_app(registry)
    assert app.check_input({"agent": "a", "messages": "x"}) == InputCheck("optional", True)
    assert app.check_input({"agent": "plain", "messages": "x"}) == InputCheck("none")
    ctx = InvocationContext(
        invocation_id="inv-1",
        session_id=None,
        attempt=1,
        sink=FakeSink(),
        request_auth=user_auth(USER),
    )
    assert app.invoke_handler is not None
    try:
        result = await app.invoke_handler({"agent": "a", "messages": "note"}, ctx)
    finally:
        await app.shutdown()
    assert result["text"] == "noted: hi"
    seen = [(s.rpc_method, s.authorization) for s in mcp_test_server.seen if s.rpc_method]
    assert seen == [("server/discover", SP), ("tools/list", SP), ("tools/call", USER)]
