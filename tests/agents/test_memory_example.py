"""examples/memory.py: a handler of its own using ``ctx.thread`` (docs/agents.md "Threads and
memory"), served in process by ``tether dev``'s gateway and node."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.agents.agent_server import ALICE, BOB, serve
from tether.examples.memory import app

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Any:
    return await serve(aiohttp_client, tmp_path, app)


async def note(client: Any, text: str, session: str | None, headers: dict[str, str] = ALICE) -> Any:
    body: dict[str, Any] = {"id": str(uuid.uuid4()), "input": text}
    if session is not None:
        body["session_id"] = session
    r = await client.post("/api/invocations", json=body, headers=headers)
    assert r.status == 200, await r.text()
    return (await r.json())["output"]


async def test_each_invocation_of_a_session_sees_the_notes_before_it(client: Any) -> None:
    session = str(uuid.uuid4())
    assert (await note(client, "milk", session))["notes"] == ["milk"]
    second = await note(client, "eggs", session)
    assert second == {"notes": ["milk", "eggs"], "answer": "Notes so far: milk; eggs"}
    assert (await note(client, "tea", session, BOB))["notes"] == ["tea"]  # bob's own session
    assert (await note(client, "bread", None))["notes"] == ["bread"]  # no session: no memory
    r = await client.get(f"/api/agents/threads/{session}", headers=ALICE)
    messages = [(m["role"], m["content"]) for m in (await r.json())["messages"]]
    assert messages == [
        ("user", "milk"),
        ("assistant", "Notes so far: milk"),
        ("user", "eggs"),
        ("assistant", "Notes so far: milk; eggs"),
    ]
    assert (await client.delete(f"/api/agents/threads/{session}", headers=ALICE)).status == 200
    assert (await note(client, "jam", session))["notes"] == ["jam"]  # a fresh thread
