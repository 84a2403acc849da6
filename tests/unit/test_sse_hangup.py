"""A stream (or a sync wait) whose client hangs up ends at once, not at its next write; a
kept-alive connection goes on serving after a stream.

In process on the embedded services, with the runner ``web.run_app`` uses (which does not cancel
a handler whose client hung up) and raw sockets.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import aiohttp

from tests.inprocess import served
from tests.rawhttp import RawConnection, complete_events, dechunk, request
from tests.unit.test_sse_limits import eventually, start
from tether.agents import AgentRegistry, build_agent_app, create_agent
from tether.agents.types import AgentInput, TurnItem, message_delta
from tether.gateway.keys import STREAMS

QUIET = {"ping_interval": 15.0}
"""A run that emits nothing more: the stream writes nothing until its ping, 15 s on."""
PROMPTLY = 10.0
"""Well before the ping that would tell (15 s), or a sync caller's sync_timeout (300 s here)."""
ONE, NONE = "tether_open_streams 1.0", "tether_open_streams 0.0"


async def open_streams(client: aiohttp.ClientSession) -> str:
    async with client.get("/metrics") as r:
        text = await r.text()
    return next(line for line in text.splitlines() if line.startswith("tether_open_streams "))


async def hang_up_while_waiting(server: Any, path: str, body: dict[str, Any]) -> None:
    """POST ``body`` as a sync caller on a raw connection, hang up once it waits, and see the
    wait end well before its ``sync_timeout``."""
    payload = json.dumps(body)
    head = request(
        "POST", path, {"Content-Type": "application/json", "Content-Length": str(len(payload))}
    )
    caller = await RawConnection.open(server.base)
    await caller.send(head + payload.encode())

    async def waiting() -> bool:
        return bool(server.app[STREAMS])

    await eventually(waiting, "the sync caller to wait")
    caller.close()

    async def stopped() -> bool:
        return not server.app[STREAMS]

    await eventually(stopped, "the wait to end", within=PROMPTLY)


async def test_a_client_that_hangs_up_mid_stream_frees_its_stream_before_any_write(
    tmp_path: Path,
) -> None:
    async with (
        served(tmp_path, timers=QUIET) as server,
        aiohttp.ClientSession(server.base) as client,
    ):
        invocation_id = await start(client, {"emit": 1, "wait_cancel": True})
        reader = await RawConnection.open(server.base)
        await reader.send(request("GET", f"/api/invocations/{invocation_id}/events"))
        assert (await reader.read_head()).status == 200

        async def following() -> bool:
            return bool(server.app[STREAMS]) and await open_streams(client) == ONE

        await eventually(following, "the stream to follow the run")
        reader.close()

        async def freed() -> bool:
            return not server.app[STREAMS] and await open_streams(client) == NONE

        # Without noticing the hang-up, the stream would hold on until its ping.
        await eventually(freed, "the stream to end", within=PROMPTLY)
        await client.post(f"/api/invocations/{invocation_id}/cancel", json={})


async def test_a_sync_caller_that_hangs_up_stops_waiting_before_its_sync_timeout(
    tmp_path: Path,
) -> None:
    async with (
        served(tmp_path, timers={"sync_timeout": 300}) as server,
        aiohttp.ClientSession(server.base) as client,
    ):
        invocation_id = str(uuid.uuid4())
        payload = {"id": invocation_id, "input": {"wait_cancel": True}}
        await hang_up_while_waiting(server, "/api/invocations", payload)
        await client.post(f"/api/invocations/{invocation_id}/cancel", json={})


async def test_a_request_pipelined_behind_a_live_stream_is_answered_once_it_ends(
    tmp_path: Path,
) -> None:
    async with (
        served(tmp_path) as server,
        aiohttp.ClientSession(server.base) as client,
    ):
        invocation_id = await start(client, {"emit": 1, "wait_cancel": True})
        reader = await RawConnection.open(server.base)
        stream = request("GET", f"/api/invocations/{invocation_id}/events")
        status = request("GET", f"/api/invocations/{invocation_id}", {"Connection": "close"})
        await reader.send(stream + status)
        assert (await reader.read_head()).status == 200

        async def following() -> bool:
            return bool(server.app[STREAMS])

        await eventually(following, "the stream to follow the run")
        async with client.post(f"/api/invocations/{invocation_id}/cancel", json={}) as r:
            assert r.status == 200
        body = await reader.read_to_end()
        reader.close()
    events, sep, after_stream = body.partition(b"\r\n0\r\n\r\n")
    assert sep, body
    assert [e.type for e in complete_events(dechunk(events).decode())][-1] == "run.cancelled"
    assert after_stream.startswith(b"HTTP/1.1 200 OK\r\n"), after_stream
    assert b'"status":"cancelled"' in after_stream


async def test_an_http_1_0_stream_ends_with_its_connection_even_when_kept_alive_was_asked(
    tmp_path: Path,
) -> None:
    """HTTP/1.0 has no chunks: the end of the stream is the end of the connection, so a request
    pipelined behind it is never answered on it (it would read as more of the stream)."""
    async with (
        served(tmp_path) as server,
        aiohttp.ClientSession(server.base) as client,
    ):
        invocation_id = await start(client, {"emit": 2})
        async with client.get(f"/api/invocations/{invocation_id}/events") as r:
            assert r.status == 200
            await r.read()
        reader = await RawConnection.open(server.base)
        stream = f"GET /api/invocations/{invocation_id}/events HTTP/1.0\r\n"
        await reader.send(
            f"{stream}Connection: keep-alive\r\n\r\nGET /healthz HTTP/1.0\r\n\r\n".encode()
        )
        head = await reader.read_head()
        body = await reader.read_to_end(timeout=10)
        reader.close()
    assert head.status == 200 and head.headers.get("connection", "close") == "close", head
    assert [e.type for e in complete_events(body.decode())][-1] == "run.completed"
    assert b"HTTP/1.0 200" not in body, body


async def test_a_stream_asked_to_close_its_connection_does_not_say_keep_alive(
    tmp_path: Path,
) -> None:
    async with (
        served(tmp_path) as server,
        aiohttp.ClientSession(server.base) as client,
    ):
        invocation_id = await start(client, {"emit": 2})
        reader = await RawConnection.open(server.base)
        path = f"/api/invocations/{invocation_id}/events"
        await reader.send(request("GET", path, {"Connection": "close"}))
        head = await reader.read_head()
        body = await reader.read_to_end(timeout=10)
        reader.close()
    assert head.status == 200 and head.headers["connection"] == "close", head
    assert [e.type for e in complete_events(dechunk(body).decode())][-1] == "run.completed"


class Stalled:
    """A model whose turn never ends: the run stays running."""

    name = "stalled"
    accepts_extensions: frozenset[str] = frozenset()
    consumes_input_tools = True

    async def turn(self, request: AgentInput) -> AsyncGenerator[TurnItem, None]:
        await asyncio.Event().wait()
        yield message_delta("never")  # pragma: no cover - the turn never gets here


async def test_a_sync_responses_caller_that_hangs_up_stops_waiting_before_its_sync_timeout(
    tmp_path: Path,
) -> None:
    """``POST /api/agents/invocations`` without ``stream`` waits as a sync POST does."""
    agent = create_agent("stalled", "Stalls.", model=Stalled(), default=True)
    app = build_agent_app(AgentRegistry.of([agent]))
    async with (
        served(tmp_path, app, timers={"sync_timeout": 300}) as server,
        aiohttp.ClientSession(server.base) as client,
    ):
        await hang_up_while_waiting(server, "/api/agents/invocations", {"input": "hello"})
        async with client.get("/api/invocations", params={"status": "active"}) as r:
            running = (await r.json())["data"]
        for invocation in running:
            await client.post(f"/api/invocations/{invocation['id']}/cancel", json={})
