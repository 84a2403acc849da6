"""A sync caller still waiting when ``tether dev`` stops (SIGTERM) gets its answer at once: 202
with the URLs to follow the run, which is durable. It was left waiting for aiohttp's shutdown
timeout, twice, and then its connection was closed with no answer at all."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.agents.agent_server import wait_for
from tether import AgentApp, InvocationContext
from tether.cli.compose import dev_app
from tether.gateway.keys import STREAMS
from tether.settings import load_settings

app = AgentApp(name="stuck")


@app.invoke
async def invoke(value: Any, ctx: InvocationContext) -> Any:
    await asyncio.Event().wait()  # runs until the node hands it back


async def test_a_waiting_sync_caller_gets_202_when_the_server_stops(tmp_path: Path) -> None:
    settings = load_settings(
        None, embedded_path=str(tmp_path / "t.db"), timers={"shutdown_grace": 0.2}
    )
    runner = web.AppRunner(dev_app(settings, app), shutdown_timeout=5)  # as `tether dev` serves
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    invocation_id = str(uuid.uuid4())
    async with aiohttp.ClientSession() as http:
        url = f"http://{host}:{port}/api/invocations"
        post = asyncio.create_task(http.post(url, json={"id": invocation_id, "input": {}}))

        async def waiting() -> bool:  # the sync POST waits for its run
            return bool(runner.app[STREAMS])

        await wait_for(waiting)
        stopping = asyncio.create_task(runner.cleanup())
        response = await asyncio.wait_for(post, 10)  # without the fix: a closed connection
        assert response.status == 202, await response.text()
        body = await response.json()
        assert body["id"] == invocation_id and body["status"] == "active"
        assert body["status_url"].endswith(invocation_id)
        await stopping


async def test_a_sync_caller_that_begins_to_wait_once_stopping_has_begun_is_answered_too(
    tmp_path: Path,
) -> None:
    """A request already being handled when the process began to stop registers its wait after
    the streams were told: it is told at once, not left to its sync_timeout (here 300 s)."""
    settings = load_settings(
        None,
        embedded_path=str(tmp_path / "t.db"),
        timers={"shutdown_grace": 0.2, "sync_timeout": 300},
    )
    runner = web.AppRunner(dev_app(settings, app), shutdown_timeout=5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        runner.app[STREAMS].close()  # what the shutdown does first, before this request waits
        async with aiohttp.ClientSession() as http:
            body = {"id": str(uuid.uuid4()), "input": {}}
            post = http.post(f"http://{host}:{port}/api/invocations", json=body)
            response = await asyncio.wait_for(post, 10)
            assert response.status == 202, await response.text()
    finally:
        await runner.cleanup()
