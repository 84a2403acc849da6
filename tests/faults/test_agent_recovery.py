"""An agent run whose worker is SIGKILLed after the second of three tool calls.

The model is a fake OpenAI-compatible server in this test; it holds the third model turn open
until the worker has been killed. The replacement attempt resumes from the last checkpoint:
every tool ran exactly once, and the model was asked again only for the interrupted turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa
from aiohttp import web

from tests.client import Api, assert_clean_log, new_id
from tests.harness import Cluster
from tether.store.store import Store

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

FAST_TIMERS = {
    "TETHER_TIMERS__HEARTBEAT_INTERVAL": "0.5",
    "TETHER_TIMERS__STALE_AFTER": "3",
    "TETHER_TIMERS__REAPER_INTERVAL": "0.5",
}


def chunk(delta: dict[str, Any]) -> bytes:
    return f"data: {json.dumps({'choices': [{'delta': delta}]})}\n\n".encode()


class FakeModel:
    """Turn k (k = tool results so far) asks for step(k+1); after three, it answers "done"."""

    def __init__(self) -> None:
        self.turns: Counter[int] = Counter()
        self.third_turn_seen = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        turn = sum(1 for m in body["messages"] if m.get("role") == "tool")
        self.turns[turn] += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if turn == 2 and self.turns[turn] == 1:
            self.third_turn_seen.set()
            await asyncio.Event().wait()  # held open until the worker dies
        if turn < 3:
            call = {
                "index": 0,
                "id": f"call_{turn + 1}",
                "type": "function",
                "function": {"name": "step", "arguments": json.dumps({"n": turn + 1})},
            }
            await response.write(chunk({"tool_calls": [call]}))
        else:
            await response.write(chunk({"content": "done"}))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        self.runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    fake = FakeModel()
    await fake.start()
    yield fake
    assert fake.runner is not None
    await fake.runner.cleanup()


async def worker_pid(database_url: str, invocation_id: str) -> int:
    store = Store.postgres(database_url, pool_size=1)
    try:
        async with store.engine.connect() as conn:
            worker = await conn.scalar(
                sa.text("SELECT worker FROM tether_invocations WHERE id = :id"),
                {"id": invocation_id},
            )
    finally:
        await store.close()
    return int(str(worker).rsplit(":", 1)[1])


async def test_a_killed_agent_run_resumes_without_rerunning_tools(
    model: FakeModel, fresh_db: str, redis_url: str, tmp_path: Path
) -> None:
    # a database of its own: another suite's workers on a shared one would take over the
    # killed run (every worker reaps every dead attempt) and run it with their own app
    tool_log = tmp_path / "tools.log"
    env = {
        **FAST_TIMERS,
        "OPENAI_BASE_URL": model.url,
        "OPENAI_API_KEY": "test",
        "TETHER_TEST_TOOL_LOG": str(tool_log),
    }
    cluster = Cluster(
        fresh_db,
        redis_url,
        tmp_path,
        app="tests.apps.recovery_agents.app:app",
        env_overrides=env,
    )
    try:
        _, base = await asyncio.to_thread(cluster.start_gateway)
        await asyncio.to_thread(cluster.start_worker, 1)
        async with aiohttp.ClientSession() as session:
            api = Api(session, base)
            invocation_id = new_id()
            status, _ = await api.post({"id": invocation_id, "input": "go", "background": True})
            assert status == 202
            await asyncio.wait_for(model.third_turn_seen.wait(), 60)
            victim = await worker_pid(fresh_db, invocation_id)
            await asyncio.to_thread(cluster.start_worker, 1)  # a survivor to take over
            os.kill(victim, signal.SIGKILL)

            done = await api.wait_status(invocation_id, {"completed", "failed"}, timeout=60)
            events = await api.events(invocation_id)
    finally:
        await asyncio.to_thread(cluster.stop)

    assert done["status"] == "completed", done
    assert done["attempt"] == 2 and done["output"]["text"] == "done"
    runs = [line.split() for line in tool_log.read_text().splitlines()]
    assert [n for n, _ in runs] == ["1", "2", "3"]  # each tool executed exactly once
    assert runs[0][1] == runs[1][1] == str(victim) != runs[2][1]
    assert dict(model.turns) == {0: 1, 1: 1, 2: 2, 3: 1}  # only the interrupted turn again
    assert_clean_log([e for e in events])
    assert [e.data["attempt"] for e in events if e.type == "run.started"] == [1, 2]
