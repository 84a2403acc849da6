"""An agent run that loaded a skill and called an MCP tool, its worker SIGKILLed mid-run.

Real processes: a gateway, workers, the example MCP server (``examples/mcp_server.py``, which
logs every tool call it serves) and a fake OpenAI-compatible model in this test, which holds the
third model turn open until the worker is dead. Before the survivor boots, the skill changes on
disk. The replacement attempt resumes: the MCP server served ``add_note`` exactly once, and the
model is shown the skill as the first attempt loaded it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.client import Api, assert_clean_log, new_id
from tests.faults.harness_ext import FAST_TIMERS
from tests.faults.test_agent_recovery import chunk, worker_pid
from tests.harness import ROOT, Cluster, Proc, free_port, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

SKILL = ROOT / "examples" / "agents" / "skills" / "trip-notes"
ORIGINAL = "Call `mcp.notes.search_notes` with the city"
CHANGED = "THIS SKILL CHANGED AFTER THE FIRST ATTEMPT"
CALLS = [
    ("load_skill", {"skill": "trip-notes"}),
    ("mcp__notes__add_note", {"city": "paris", "text": "Louvre opens at nine"}),
]


class FakeModel:
    """Turn k (k = tool results so far) makes call k; the third turn is held open the first
    time it is asked, and answers "done" the second time."""

    def __init__(self) -> None:
        self.turns: Counter[int] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.third_turn_seen = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        turn = sum(1 for m in body["messages"] if m.get("role") == "tool")
        self.turns[turn] += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if turn == len(CALLS) and self.turns[turn] == 1:
            self.third_turn_seen.set()
            await asyncio.Event().wait()  # held open until the worker dies
        if turn < len(CALLS):
            name, args = CALLS[turn]
            function = {"name": name, "arguments": json.dumps(args)}
            call = {"index": 0, "id": f"call_{turn}", "type": "function", "function": function}
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
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/v1"


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    fake = FakeModel()
    await fake.start()
    yield fake
    assert fake.runner is not None
    await fake.runner.cleanup()


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.5):
            return True
    except OSError:
        return False


@pytest.fixture
def mcp_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The example MCP server as a process of its own: (its URL, its call log)."""
    port, calls, log = free_port(), tmp_path / "mcp-calls.log", tmp_path / "mcp-server.log"
    command = [sys.executable, "-m", "tether.examples.mcp_server", "--port", str(port)]
    with log.open("wb") as handle:
        popen = subprocess.Popen(
            [*command, "--call-log", str(calls)],
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc = Proc("mcp-server", popen, log)
    try:
        wait_for(lambda: port_open(port) or popen.poll() is not None, 30, "the MCP server")
        assert popen.poll() is None, proc.log()
        yield f"http://127.0.0.1:{port}/mcp", calls
    finally:
        proc.stop()


async def test_a_killed_run_resumes_without_calling_the_mcp_tool_again(
    model: FakeModel,
    mcp_server: tuple[str, Path],
    fresh_db: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    # a database of its own: another suite's workers on a shared one would take over the
    # killed run (every worker reaps every dead attempt) and run it with their own app
    url, mcp_calls = mcp_server
    skills = tmp_path / "skills"
    shutil.copytree(SKILL, skills / "trip-notes")
    env = {
        **FAST_TIMERS,
        "OPENAI_BASE_URL": model.url,
        "OPENAI_API_KEY": "test",
        "TETHER_TEST_MCP_URL": url,
        "TETHER_TEST_SKILLS_DIR": str(skills),
    }
    cluster = Cluster(
        fresh_db,
        redis_url,
        tmp_path,
        app="tests.apps.skill_mcp_agents.app:app",
        env_overrides=env,
    )
    try:
        _, base = await asyncio.to_thread(cluster.start_gateway)
        await asyncio.to_thread(cluster.start_worker, 1)
        async with aiohttp.ClientSession() as session:
            api = Api(session, base)
            invocation_id = new_id()
            status, _ = await api.post(
                {"id": invocation_id, "input": "note it", "background": True}
            )
            assert status == 202
            await asyncio.wait_for(model.third_turn_seen.wait(), 60)
            victim = await worker_pid(fresh_db, invocation_id)
            skill_md = skills / "trip-notes" / "SKILL.md"
            skill_md.write_text(skill_md.read_text().replace(ORIGINAL, CHANGED))
            await asyncio.to_thread(cluster.start_worker, 1)  # boots with the changed skill
            os.kill(victim, signal.SIGKILL)

            done = await api.wait_status(invocation_id, {"completed", "failed"}, timeout=60)
            events = await api.events(invocation_id)
    finally:
        await asyncio.to_thread(cluster.stop)

    assert done["status"] == "completed", done
    assert done["attempt"] == 2 and done["output"]["text"] == "done"
    served = [line.split() for line in mcp_calls.read_text().splitlines()]
    assert [tool for tool, _ in served] == ["add_note"]  # the MCP tool ran exactly once
    assert dict(model.turns) == {0: 1, 1: 1, 2: 2}  # only the interrupted turn again
    replayed = json.dumps(model.bodies[-1]["messages"])  # what the survivor showed the model
    assert ORIGINAL in replayed and CHANGED not in replayed
    assert "Noted for paris: Louvre opens at nine" in replayed
    assert_clean_log(list(events))
    assert [e.data["attempt"] for e in events if e.type == "run.started"] == [1, 2]
