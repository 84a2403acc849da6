"""Request-user auth: an on-behalf-of-user agent gets the caller's credentials in the process
that accepted the request, never in the store, the log or the events; an attempt where the
token is not fails with user_auth_recovery_unsupported unless the agent can go on without it."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents.agent_server import ALICE, TOKEN, Counter, agent_app, serve, wait_for, whoami
from tether.agents import ScriptedModel, build_agent_app, create_agent
from tether.agents.definitions import AgentDefinition
from tether.agents.registry import AgentRegistry
from tether.gateway.app import create_app
from tether.gateway.keys import SERVICES
from tether.jsonvalue import canonical, request_hash
from tether.services import Services
from tether.settings import load_settings
from tether.store.schema import NewInvocation
from tether.worker.wiring import embedded_node

pytestmark = pytest.mark.timeout(60)
WITH_TOKEN = {**ALICE, "X-Forwarded-Access-Token": TOKEN}


async def post(client: Any, value: Any, headers: dict[str, str]) -> tuple[int, Any]:
    r = await client.post(
        "/api/invocations", json={"id": str(uuid.uuid4()), "input": value}, headers=headers
    )
    return r.status, await r.json()


async def test_an_on_behalf_of_user_agent_runs_its_tools_as_the_caller_and_keeps_no_token(
    aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = await serve(aiohttp_client, tmp_path, agent_app(Counter()))
    code, body = await post(client, {"agent": "obo", "messages": "who am I"}, WITH_TOKEN)
    assert code == 200, body
    seen = body["output"]["text"]
    assert '"user":"alice"' in seen and '"has_user":true' in seen
    assert '"step_key":true' in seen
    events = await (await client.get(f"/api/invocations/{body['id']}/events", headers=ALICE)).text()
    for where in (
        (tmp_path / "agents.db").read_bytes().decode("latin-1"),
        caplog.text,
        events,
        repr(client.app[SERVICES].credentials),
    ):
        assert TOKEN not in where
    assert len(client.app[SERVICES].credentials or ()) == 0  # forgotten at the end


async def test_an_on_behalf_of_user_agent_without_a_token_is_refused_before_accepting(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await serve(aiohttp_client, tmp_path, agent_app(Counter()))
    code, body = await post(client, {"agent": "obo", "messages": "who am I"}, ALICE)
    assert code == 401 and "X-Forwarded-Access-Token" in body["error"]["message"]


async def test_other_agents_never_get_the_token(aiohttp_client: Any, tmp_path: Path) -> None:
    counter = Counter()
    client = await serve(aiohttp_client, tmp_path, agent_app(counter))
    code, body = await post(client, "hi", WITH_TOKEN)
    assert code == 200 and counter.requests[-1].auth_headers is None
    row = await client.app[SERVICES].store.get(body["id"])
    assert row is not None


async def test_the_model_of_an_on_behalf_of_user_agent_is_called_with_the_callers_headers(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    counter = Counter()
    agent = create_agent("me", "Me.", model=counter, auth="on-behalf-of-user")
    client = await serve(aiohttp_client, tmp_path, build_agent_app(AgentRegistry.of([agent])))
    assert (await post(client, "hi", WITH_TOKEN))[0] == 200
    assert counter.requests[-1].auth_headers is not None


@pytest.mark.parametrize(("agent", "status"), [("obo", "failed"), ("resumable", "completed")])
async def test_an_attempt_where_the_token_is_not_fails_unless_the_agent_resumes_without_it(
    aiohttp_client: Any, tmp_path: Path, agent: str, status: str
) -> None:
    client = await serve(aiohttp_client, tmp_path, agent_app(Counter()))
    services = client.app[SERVICES]
    value = {"agent": agent, "messages": "who am I"}
    invocation_id = str(uuid.uuid4())
    # As a replacement after the accepting process died: flagged, and no token in this one.
    new = NewInvocation(
        invocation_id, "alice", None, value, request_hash(canonical(value), None), True
    )
    await services.store.accept(new)
    await services.queue.send([invocation_id])

    async def ended() -> bool:
        row = await services.store.get(invocation_id)
        return row is not None and row.status.is_terminal

    await wait_for(ended)
    row = await services.store.get(invocation_id)
    assert row is not None and row.status.value == status
    if status == "failed":
        assert row.error_code == "user_auth_recovery_unsupported"
    else:
        assert '"has_user":false' in row.output["text"]


async def test_where_workers_run_elsewhere_an_on_behalf_of_user_agent_is_refused_with_why(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    settings = load_settings(
        None,
        embedded_path=str(tmp_path / "d.db"),
        timers={"shutdown_grace": 0.2},
        auth={"mode": "forwarded", "trusted_proxies": ["127.0.0.1"]},
    )
    app = agent_app(Counter())

    @contextlib.asynccontextmanager
    async def no_vault() -> AsyncIterator[Services]:
        async with embedded_node(settings, app) as services:
            yield dataclasses.replace(services, credentials=None)

    client = await aiohttp_client(create_app(settings, app, no_vault))
    code, body = await post(client, {"agent": "obo", "messages": "hi"}, WITH_TOKEN)
    assert code == 422 and "other processes" in body["error"]["message"]
    assert TOKEN.encode() not in (tmp_path / "d.db").read_bytes()
    code, _ = await post(client, "hi", WITH_TOKEN)  # agents that do not need it still run
    assert code == 200


def delegating(child: AgentDefinition, **options: Any) -> tuple[AgentDefinition, ScriptedModel]:
    """An agent whose model calls ``child`` once, then answers with what it said."""
    model = ScriptedModel.of({"tool_calls": [{"name": f"agent-{child.name}"}]}, "{result}")
    return create_agent("boss", "Boss.", model=model, agents=[child], **options), model


async def test_an_on_behalf_of_user_sub_agent_runs_as_the_caller_and_its_parent_does_not(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    child_model = ScriptedModel.of({"tool_calls": [{"name": "whoami"}]}, "{result}")
    child = create_agent(
        "child", "Child.", model=child_model, tools=[whoami], auth="on-behalf-of-user"
    )
    boss, boss_model = delegating(child)
    client = await serve(aiohttp_client, tmp_path, build_agent_app(AgentRegistry.of([boss])))
    code, body = await post(client, "hi", ALICE)  # it needs the caller's token, as its child
    assert code == 401 and "X-Forwarded-Access-Token" in body["error"]["message"]
    code, body = await post(client, "hi", WITH_TOKEN)
    assert code == 200, body
    assert (
        '"user":"alice"' in body["output"]["text"] and '"has_user":true' in body["output"]["text"]
    )
    assert all(r.auth_headers is not None for r in child_model.requests)
    assert all(r.auth_headers is None for r in boss_model.requests)


async def test_a_sub_agent_without_auth_never_gets_its_on_behalf_of_user_parents_token(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    child_model = ScriptedModel.of({"tool_calls": [{"name": "whoami"}]}, "{result}")
    child = create_agent("child", "Child.", model=child_model, tools=[whoami])
    boss, boss_model = delegating(child, auth="on-behalf-of-user")
    client = await serve(aiohttp_client, tmp_path, build_agent_app(AgentRegistry.of([boss])))
    code, body = await post(client, "hi", WITH_TOKEN)
    assert code == 200, body
    assert '"user":null' in body["output"]["text"]
    assert all(r.auth_headers is None for r in child_model.requests)
    assert all(r.auth_headers is not None for r in boss_model.requests)
