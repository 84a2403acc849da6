"""/api/agents/invocations as OpenAI's client library meets it: a run that ended without an
answer (failed: 500, cancelled: 409) is an outcome, not a transient fault, so the answer says
``x-should-retry: false``; the library otherwise posts the request again, which starts a new run
(a failed model called three times, a cancelled run started again)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.agents.agent_server import ALICE, serve, wait_for
from tether.agents import AgentRegistry, ScriptedModel, build_agent_app, create_agent, tool
from tether.agents.adapters.scripted import ScriptedTurn

pytestmark = pytest.mark.timeout(60)


@tool(effect="read")
async def hang() -> str:
    """Never returns."""
    await asyncio.Event().wait()
    return ""


def app_with_default(default: str) -> Any:
    failing = create_agent(
        "failing", "Fails.", model=ScriptedModel([ScriptedTurn(error="transport")])
    )
    hanging = create_agent(
        "hanging",
        "Hangs.",
        model=ScriptedModel([ScriptedTurn(tool_calls=(("hang", {}),)), ScriptedTurn("never")]),
        tools=[hang],
    )
    return build_agent_app(AgentRegistry.of([failing, hanging], default_agent=default))


async def listed(client: Any) -> list[dict[str, Any]]:
    body = await (await client.get("/api/invocations", headers=ALICE)).json()
    return list(body["data"])


async def test_a_failed_run_is_answered_as_not_to_be_retried(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await serve(aiohttp_client, tmp_path, app_with_default("failing"))
    r = await client.post("/api/agents/invocations", json={"input": "go"}, headers=ALICE)
    assert r.status == 500
    assert r.headers.get("x-should-retry") == "false"


async def test_a_cancelled_run_is_answered_as_not_to_be_retried(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await serve(aiohttp_client, tmp_path, app_with_default("hanging"))
    post = asyncio.ensure_future(
        client.post("/api/agents/invocations", json={"input": "go"}, headers=ALICE)
    )

    async def running() -> bool:
        return any(i["status"] == "active" for i in await listed(client))

    await wait_for(running)
    stream_id = (await listed(client))[0]["id"]
    await client.post("/api/agents/cancel", json={"streamId": stream_id}, headers=ALICE)
    r = await post
    assert r.status == 409
    assert r.headers.get("x-should-retry") == "false"
