"""Budgets and usage through the HTTP API in process (embedded mode, every answer checked
against /openapi.json): the status document's ``usage``, ``budget_exceeded``, a parked run
resumed by its wait, and the per-tenant metrics."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.agents.agent_server import ALICE, serve, wait_for
from tether.agents import ScriptedModel, build_agent_app, create_agent, tool
from tether.agents.adapters.scripted import ScriptedTurn
from tether.agents.registry import AgentRegistry
from tether.gateway.keys import SERVICES
from tether.store.store import Store

pytestmark = pytest.mark.timeout(60)


@tool
def tick() -> str:
    """Ticks."""
    return "tick"


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Any:
    spender = create_agent(
        "spender",
        "Answers once.",
        model=ScriptedModel([ScriptedTurn("done", usage=(100, 20))]),
        price={"input": 2.0, "output": 10.0},
        default=True,
    )
    looping = [ScriptedTurn(tool_calls=(("tick", {}),), usage=(100, 20))] * 3
    looper = create_agent("looper", "Loops.", model=ScriptedModel(looping), tools=[tick])
    app = build_agent_app(AgentRegistry.of([spender, looper]))
    return await serve(aiohttp_client, tmp_path, app)


def store_of(client: Any) -> Store:
    store: Store = client.app[SERVICES].store
    return store


async def submit(client: Any, value: Any, **mode: Any) -> tuple[int, dict[str, Any]]:
    body = {"id": str(uuid.uuid4()), "input": value, **mode}
    r = await client.post("/api/invocations", json=body, headers=ALICE)
    return r.status, {"id": body["id"], **await r.json()}


async def status(client: Any, invocation_id: str) -> dict[str, Any]:
    r = await client.get(f"/api/invocations/{invocation_id}", headers=ALICE)
    assert r.status == 200
    document: dict[str, Any] = await r.json()
    return document


async def test_the_status_document_and_the_metrics_show_the_runs_usage(client: Any) -> None:
    code, body = await submit(client, "hi")
    assert code == 200 and body["output"]["text"] == "done"
    document = await status(client, body["id"])
    assert document["usage"] == {
        "input_tokens": 100,
        "output_tokens": 20,
        "total_tokens": 120,
        "cost": pytest.approx(0.0004),  # (100 × 2 + 20 × 10) per million tokens
        "estimated": False,
        "model_calls": 1,
    }
    r = await client.get("/api/admin/metrics", headers={"X-Forwarded-User": "root"})
    text = await r.text()
    assert 'tether_tenant_tokens_total{tenant="alice"} 120.0' in text
    assert 'tether_tenant_period_tokens{tenant="alice"} 120.0' in text


async def test_a_run_without_model_calls_has_no_usage(client: Any) -> None:
    await store_of(client).tenants.set("alice", {"tokens_per_invocation": 0})
    code, body = await submit(client, "hi")
    assert code == 500 and body["error"]["code"] == "budget_exceeded"
    document = await status(client, body["id"])
    assert "usage" not in document
    assert document["error"] == {
        "code": "budget_exceeded",
        "message": "the invocation's token or cost budget is spent",
    }


async def test_a_spent_budget_fails_the_run_with_budget_exceeded(client: Any) -> None:
    await store_of(client).tenants.set("alice", {"tokens_per_invocation": 200})
    code, body = await submit(client, {"agent": "looper", "messages": "go"})
    assert code == 500 and body["error"]["code"] == "budget_exceeded"
    document = await status(client, body["id"])
    assert document["status"] == "failed" and document["usage"]["model_calls"] == 2
    assert document["usage"]["total_tokens"] == 240  # over by the one call that crossed 200


async def test_a_parked_run_waits_for_its_budget_and_resumes_when_its_wait_is_resolved(
    client: Any,
) -> None:
    store = store_of(client)
    await store.tenants.set("alice", {"tokens_per_invocation": 100, "on_budget": "park"})
    code, body = await submit(client, {"agent": "looper", "messages": "go"}, background=True)
    assert code == 202
    invocation_id = body["id"]

    async def waiting() -> bool:
        return bool((await status(client, invocation_id))["status"] == "waiting")

    await wait_for(waiting)
    document = await status(client, invocation_id)
    [wait] = document["waiting_for"]
    assert wait["wait"].startswith("budget:") and wait["budget"] == "tokens_per_invocation"
    assert wait["expires_at"] is not None  # checked again when the next period starts
    assert document["usage"]["model_calls"] == 1
    await store.tenants.set("alice", {"tokens_per_invocation": None})
    r = await client.post(
        f"/api/invocations/{invocation_id}/input",
        json={"wait": wait["wait"], "value": None},
        headers=ALICE,
    )
    assert r.status in (200, 202)

    async def completed() -> bool:
        return bool((await status(client, invocation_id))["status"] == "completed")

    await wait_for(completed)
    assert (await status(client, invocation_id))["usage"]["model_calls"] == 4
