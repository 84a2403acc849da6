"""An agent app served in-process by ``tether dev``'s gateway and node (every answer checked
against /openapi.json), with two callers behind 127.0.0.1 as the trusted proxy."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from tests.openapi_check import checked_trace
from tether import AgentApp
from tether.agents import (
    AgentRegistry,
    ApprovalPolicy,
    ScriptedModel,
    ToolError,
    build_agent_app,
    create_agent,
    tool,
)
from tether.agents.adapters.scripted import ScriptedTurn
from tether.agents.tool_context import ToolContext
from tether.agents.types import AgentInput, TurnItem, TurnOutcome, message_delta
from tether.cli.compose import dev_app
from tether.settings import load_settings

ALICE = {"X-Forwarded-User": "alice"}
BOB = {"X-Forwarded-User": "bob"}
TOKEN = "dapi-alice-secret-0123456789abcdef"


class Counter:
    """A model that answers with what it was shown: the user turns, in order, joined by '|'."""

    name = "counter"
    accepts_extensions: frozenset[str] = frozenset()
    consumes_input_tools = True

    def __init__(self) -> None:
        self.requests: list[AgentInput] = []

    async def turn(self, request: AgentInput) -> AsyncGenerator[TurnItem, None]:
        self.requests.append(request)
        text = "|".join(m.content for m in request.messages if m.role == "user")
        yield message_delta(text)
        yield TurnOutcome(text)


@tool
def boom() -> str:
    """Always fails."""
    raise ToolError("kaboom")


@tool
def whoami(context: ToolContext) -> dict[str, Any]:
    """Who the call runs for."""
    auth = context.request_auth
    return {
        "user": auth.user if auth is not None else None,
        "has_user": auth.has_user if auth is not None else False,
        "invocation": context.invocation_id,
        "step_key": bool(context.step_key),
    }


@tool(effect="destructive")
def wipe() -> str:
    """Wipes."""
    return "wiped"


def registry(counter: Counter) -> AgentRegistry:
    chat = create_agent("chat", "Chat.", model=counter, default=True)
    forgetful = create_agent("forgetful", "Forget.", model=counter, ephemeral=True)
    booms = create_agent(
        "booms",
        "Booms.",
        model=ScriptedModel(
            [ScriptedTurn(tool_calls=(("boom", {}),)), ScriptedTurn("hello world")]
        ),
        tools=[boom],
    )
    obo_script = [ScriptedTurn(tool_calls=(("whoami", {}),)), ScriptedTurn("{result}")]
    obo = create_agent(
        "obo",
        "As the user.",
        model=ScriptedModel(obo_script),
        tools=[whoami],
        auth="on-behalf-of-user",
    )
    resumable = create_agent(
        "resumable",
        "As the user, or not.",
        model=ScriptedModel(obo_script),
        tools=[whoami],
        auth="on-behalf-of-user",
        resume_without_user=True,
    )
    wiper = create_agent(
        "wiper",
        "Wipes.",
        model=ScriptedModel([ScriptedTurn(tool_calls=(("wipe", {}),)), ScriptedTurn("done")]),
        tools=[wipe],
    )
    agents = [chat, forgetful, booms, obo, resumable, wiper]
    return AgentRegistry.of(agents, approval=ApprovalPolicy())


def agent_app(counter: Counter) -> AgentApp:
    return build_agent_app(registry(counter))


async def serve(aiohttp_client: Any, tmp_path: Path, app: AgentApp) -> TestClient[Any, Any]:
    settings = load_settings(
        None,
        embedded_path=str(tmp_path / "agents.db"),
        timers={"shutdown_grace": 0.2, "sync_timeout": 10},
        auth={"mode": "forwarded", "trusted_proxies": ["127.0.0.1"], "admins": ["root"]},
    )
    client: TestClient[Any, Any] = await aiohttp_client(
        dev_app(settings, app), trace_configs=[checked_trace()]
    )
    return client


def parse_sse(raw: str) -> list[dict[str, Any]]:
    """Frames as ``{"id", "event", "data"}`` (comments skipped)."""
    out = []
    for block in raw.split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.splitlines():
            if line.startswith(":") or ":" not in line:
                continue
            key, _, value = line.partition(": ")
            fields[key] = json.loads(value) if key == "data" else value
        if fields:
            out.append(fields)
    return out


async def wait_for(condition: Any, deadline: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while not await condition():
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.02)


async def chat(client: Any, message: str, **extra: Any) -> tuple[int, list[dict[str, Any]]]:
    headers = extra.pop("headers", ALICE)
    r = await client.post("/api/agents/chat", json={"message": message, **extra}, headers=headers)
    if r.status != 200:
        return r.status, [await r.json()]
    return 200, parse_sse(await r.text())


def meta(frames: list[dict[str, Any]]) -> dict[str, Any]:
    assert frames[0]["event"] == "appkit.metadata", frames[0]
    return dict(frames[0]["data"]["data"])


def text_of(frames: list[dict[str, Any]]) -> str:
    done = [f for f in frames if f["event"] == "response.output_item.done"]
    return str(done[-1]["data"]["item"]["content"][0]["text"])


async def until_pending(response: Any) -> dict[str, Any]:
    """Read the open stream (it stays open while the run waits) up to the approval request."""
    raw = ""
    while True:
        raw += (await response.content.readuntil(b"\n\n")).decode()
        pending = [f for f in parse_sse(raw) if f["event"] == "appkit.approval_pending"]
        if pending:
            return dict(pending[0]["data"])
