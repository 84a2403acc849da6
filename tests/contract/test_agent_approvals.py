"""Approvals over HTTP, in both modes: the example ``bookings`` agent (scripted model) asks to run
its destructive ``cancel_booking`` tool, parks, and resumes when its owner decides on ``/input``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from yarl import URL

from tests.client import Api, assert_clean_log, new_id
from tests.harness import Cluster, start_dev
from tests.services import PG_ADMIN_URL, create_database, drop_database, require
from tether.agents import denial_text

APP = "examples.agents.app:app"
ENV = {"TETHER_TIMERS__SYNC_TIMEOUT": "2"}
REQUEST = {"agent": "bookings", "messages": "Cancel booking BK-1042"}


@pytest.fixture(scope="module")
def agents_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, base = start_dev(tmp_path_factory.mktemp("agents-dev"), APP, ENV)
    try:
        yield base
    finally:
        proc.stop()


def _migrate(url: str) -> None:
    from tether.store.store import Store

    async def run() -> None:
        store = Store.postgres(url, pool_size=1)
        try:
            await store.migrate()
        finally:
            await store.close()

    # first requested from inside the test's running loop: migrate on a thread of its own
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()


@pytest.fixture(scope="module")
def agents_cluster(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway and a worker serving the example agents, on a database of their own (so no
    other suite's reaper hands them another app's invocations, nor theirs to another app)."""
    require(PG_ADMIN_URL, 5432, "PostgreSQL")
    url = create_database()
    cluster = Cluster(url, redis_url, tmp_path_factory.mktemp("agents-cluster"), app=APP)
    cluster.env_overrides.update(ENV)
    try:
        _migrate(url)
        _, base = cluster.start_gateway()
        cluster.start_worker()
        yield base
    finally:
        cluster.stop()
        drop_database(url)


@pytest.fixture(params=["embedded", "distributed"])
async def api(request: pytest.FixtureRequest) -> AsyncIterator[Api]:
    fixture = "agents_dev" if request.param == "embedded" else "agents_cluster"
    base = str(request.getfixturevalue(fixture))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield Api(session, base)


async def parked_on_approval(api: Api) -> tuple[str, dict[str, Any]]:
    invocation_id = new_id()
    code, _ = await api.post({"id": invocation_id, "input": REQUEST, "background": True})
    assert code == 202
    status = await api.wait_status(invocation_id, {"waiting", "completed", "failed"})
    assert status["status"] == "waiting", status
    (wait,) = status["waiting_for"]
    return invocation_id, wait


async def test_an_approved_destructive_tool_runs_once_and_the_run_completes(api: Api) -> None:
    invocation_id, wait = await parked_on_approval(api)
    assert wait["wait"] == wait["approval_id"] and wait["kind"] == "input"
    assert wait["tool_name"] == "cancel_booking" and wait["args"] == {"booking_id": "BK-1042"}
    assert wait["annotations"] == {"effect": "destructive"} and wait["agent"] == "bookings"
    assert wait["expires_at"] is not None and "cancel_booking" in wait["prompt"]

    stranger = Api(api.session, api.base)
    approve = {"decision": "approve"}
    assert (await stranger.send_input(invocation_id, wait["wait"], approve))[0] == 404
    assert (await api.get(invocation_id))[1]["status"] == "waiting"
    code, _ = await api.send_input(invocation_id, wait["wait"], approve)
    assert code == 200

    done = await api.wait_status(invocation_id, {"completed", "failed"})
    assert done["status"] == "completed", done
    assert done["output"]["text"] == "Outcome: Booking BK-1042 cancelled."
    events = await api.events(invocation_id)
    assert_clean_log(events)
    kinds = [e.type for e in events]
    assert kinds.count("approval.pending") == kinds.count("approval.resolved") == 1
    assert kinds.index("approval.pending") < kinds.index("run.waiting")
    assert kinds.index("run.waiting") < kinds.index("approval.resolved")
    [result] = [e.data for e in events if e.type == "tool_result"]  # the tool ran once
    assert result["result"] == "Booking BK-1042 cancelled."
    [resolved] = [e.data for e in events if e.type == "approval.resolved"]
    assert (resolved["decision"], resolved["reason"]) == ("approve", "user")


@pytest.mark.parametrize(
    ("value", "reason"), [({"decision": "deny"}, "user"), ("yes", "invalid_decision")]
)
async def test_a_denied_or_unreadable_decision_never_runs_the_tool(
    api: Api, value: Any, reason: str
) -> None:
    invocation_id, wait = await parked_on_approval(api)
    assert (await api.send_input(invocation_id, wait["wait"], value))[0] == 200

    done = await api.wait_status(invocation_id, {"completed", "failed"})
    assert done["status"] == "completed", done
    denied = denial_text("cancel_booking")
    assert done["output"]["text"] == f"Outcome: {denied}"
    events = await api.events(invocation_id)
    assert_clean_log(events)
    [result] = [e.data for e in events if e.type == "tool_result"]
    assert result["result"] == denied
    [resolved] = [e.data for e in events if e.type == "approval.resolved"]
    assert (resolved["decision"], resolved["reason"]) == ("deny", reason)


# -- the /api/agents routes on the same two servers ------------------------------------------


async def agents_chat(api: Api, body: dict[str, Any]) -> list[dict[str, Any]]:
    from tests.agents.agent_server import parse_sse

    async with api.session.post(f"{api.base}/api/agents/chat", json=body, headers=api.headers) as r:
        assert r.status == 200, await r.text()
        return parse_sse(await r.text())


async def test_agents_chat_streams_a_durable_invocation_and_keeps_the_thread(api: Api) -> None:
    frames = await agents_chat(api, {"message": "hi there", "agent": "greeter"})
    meta = frames[0]["data"]["data"]
    assert frames[0]["event"] == "appkit.metadata" and frames[-1]["event"] == "response.completed"
    done = [f for f in frames if f["event"] == "response.output_item.done"]
    assert "You said: hi there" in done[-1]["data"]["item"]["content"][0]["text"]
    status = await api.wait_status(meta["streamId"], {"completed"})  # a durable invocation
    assert status["status"] == "completed"
    async with api.session.get(
        f"{api.base}/api/agents/threads/{meta['threadId']}", headers=api.headers
    ) as r:
        assert r.status == 200
    stranger = Api(api.session, api.base)
    async with api.session.get(
        f"{api.base}/api/agents/threads/{meta['threadId']}", headers=stranger.headers
    ) as r:
        assert r.status == 404


async def test_agents_approve_resolves_the_durable_wait(api: Api) -> None:
    invocation_id, wait = await parked_on_approval(api)
    approval_id = wait["approval_id"]
    approve = {"streamId": invocation_id, "approvalId": approval_id, "decision": "approve"}
    stranger = Api(api.session, api.base)
    async with api.session.post(
        f"{api.base}/api/agents/approve", json=approve, headers=stranger.headers
    ) as r:
        assert r.status == 404
    async with api.session.post(
        f"{api.base}/api/agents/approve", json=approve, headers=api.headers
    ) as r:
        assert r.status == 200
    done = await api.wait_status(invocation_id, {"completed", "failed"})
    assert done["status"] == "completed", done


async def test_agents_info_lists_the_example_agents(api: Api) -> None:
    async with api.session.get(f"{api.base}/api/agents/info", headers=api.headers) as r:
        assert r.status == 200
        body = await r.json()
    assert {"greeter", "bookings"} <= set(body["agents"])


async def test_a_thread_id_no_thread_can_have_is_404_in_the_path(api: Api) -> None:
    """A NUL (which PostgreSQL's text refuses) or an id over 256 characters: 404, never 500."""
    for raw in ("a%00b", "x" * 300):
        url = URL(f"{api.base}/api/agents/threads/{raw}", encoded=True)
        for method in ("GET", "DELETE"):
            async with api.session.request(method, url, headers=api.headers) as r:
                assert r.status == 404, (method, raw, await r.text())
