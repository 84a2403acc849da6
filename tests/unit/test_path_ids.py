"""An invocation's id in a path is read as the ``id`` of a POST is: any UUID spelling the POST
takes, braces included (``{…}``, as Windows' GUIDs print), names the same invocation. In
process, on the embedded store as ``tether dev`` serves it."""

from __future__ import annotations

import uuid
from pathlib import Path

import aiohttp
import pytest

from tests.inprocess import served


@pytest.mark.parametrize(
    "spell",
    [str.upper, lambda i: i.replace("-", ""), lambda i: f"urn:uuid:{i}", lambda i: f"{{{i}}}"],
)
async def test_every_spelling_a_post_takes_names_the_invocation_in_a_path(
    tmp_path: Path, spell: object
) -> None:
    invocation_id = str(uuid.uuid4())
    spelled = spell(invocation_id)  # type: ignore[operator]
    async with served(tmp_path) as server, aiohttp.ClientSession() as http:
        base = f"{server.base}/api/invocations"
        body = {"id": spelled, "input": {"wait": "w"}, "background": True}
        async with http.post(base, json=body) as r:
            assert r.status == 202 and (await r.json())["id"] == invocation_id
        async with http.get(f"{base}/{spelled}") as r:
            assert r.status == 200 and (await r.json())["id"] == invocation_id
        json_type = {"Content-Type": "application/json"}  # a POST without a body, still JSON
        async with http.post(f"{base}/{spelled}/cancel", headers=json_type) as r:
            assert r.status == 200 and (await r.json())["status"] == "cancelled"
        async with http.get(f"{base}/{spelled}/events") as r:
            assert r.status == 200
            assert "run.cancelled" in await r.text()
        async with http.post(f"{base}/{spelled}/input", json={"wait": "w", "value": 1}) as r:
            assert r.status == 409  # found, and no longer waiting


async def test_a_chat_is_followed_by_its_id_in_any_spelling(tmp_path: Path) -> None:
    """``GET /api/agents/chat/{id}`` reads its id as the invocation routes do (it was a 404)."""
    from tests.agents.agent_server import Counter, agent_app, parse_sse

    async with (
        served(tmp_path, agent_app(Counter())) as server,
        aiohttp.ClientSession() as http,
    ):
        async with http.post(f"{server.base}/api/agents/chat", json={"message": "hi"}) as r:
            assert r.status == 200
            stream_id = parse_sse(await r.text())[0]["data"]["data"]["streamId"]
        async with http.get(f"{server.base}/api/agents/chat/{{{stream_id}}}") as r:
            assert r.status == 200
            assert parse_sse(await r.text())  # the same stream again


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_a_thread_id_with_braces_reaches_the_thread_routes(
    tmp_path: Path, method: str
) -> None:
    """Such an id was refused by the router (aiohttp's own 404) before the handler saw it."""
    from tests.agents.agent_server import Counter, agent_app

    async with (
        served(tmp_path, agent_app(Counter())) as server,
        aiohttp.ClientSession() as http,
        http.request(method, f"{server.base}/api/agents/threads/a%7Bb%7D") as r,
    ):
        assert r.status == 404
        assert (await r.json())["error"]["message"] == "Thread not found"  # the handler's
