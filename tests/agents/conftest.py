"""A fake model server on 127.0.0.1 that replays scripted HTTP streams, and fake attempts."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from databricks.sdk.config import Config

from tests.agents.mcp_fixtures import McpTestServer
from tests.fakes import MemoryJournal
from tether.app import AgentApp
from tether.context import InvocationContext
from tether.durable import Suspend
from tether.jsonvalue import dumps


@dataclass
class Reply:
    """One scripted HTTP reply: a status, body chunks, then optionally a stall that never ends."""

    chunks: list[bytes] = field(default_factory=list)
    status: int = 200
    stall: bool = False
    stall_before_headers: bool = False
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeModelServer:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Recorded] = []
        self.stalled = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.requested = asyncio.Event()
        """Set once a request came."""
        self.url = ""
        self._runner: web.AppRunner | None = None

    def reply(self, *chunks: bytes | str, **options: Any) -> None:
        raw = [c.encode() if isinstance(c, str) else c for c in chunks]
        self.replies.append(Reply(raw, **options))

    async def _well_known(self, request: web.Request) -> web.Response:
        return web.json_response({})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        text = await request.text()
        self.requests.append(
            Recorded(
                request.method,
                request.path,
                dict(request.headers),
                json.loads(text) if text else None,
            )
        )
        self.requested.set()
        reply = self.replies.pop(0) if self.replies else Reply(status=500)
        try:
            if reply.stall_before_headers:
                self.stalled.set()
                await asyncio.Event().wait()
            if reply.status != 200:
                return web.Response(
                    status=reply.status, text="secret upstream body dapi0123", headers=reply.headers
                )
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for chunk in reply.chunks:
                await response.write(chunk)
            if reply.stall:
                self.stalled.set()
                await asyncio.Event().wait()
            await response.write_eof()
            return response
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/.well-known/databricks-config", self._well_known)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A hang in an agents test fails fast instead of at the suite's 120 s timeout."""
    for item in items:
        if "tests/agents/" in str(item.fspath):
            item.add_marker(pytest.mark.timeout(15))


@pytest.fixture
async def server() -> AsyncIterator[FakeModelServer]:
    fake = FakeModelServer()
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
def mcp_test_server() -> Iterator[McpTestServer]:
    """A real MCP server (the SDK's) on 127.0.0.1, stopped after the test."""
    mcp = McpTestServer()
    mcp.start()
    yield mcp
    mcp.stop()


@pytest.fixture
async def config(server: FakeModelServer) -> Config:
    """databricks-sdk pointed at the fake server (built off-loop: Config probes the host)."""
    return await asyncio.to_thread(Config, host=server.url, token="x")


def chat_chunk(content: Any = None, tool_calls: Any = None, **delta: Any) -> str:
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return f"data: {dumps({'choices': [{'delta': delta}]})}\n\n"


def sse(event_type: str, data: Any) -> str:
    return f"event: {event_type}\ndata: {dumps(data)}\n\n"


class FakeSink(MemoryJournal):
    """The AttemptSink seam in memory: the invocation's event log and record, kept across its
    attempts. With ``crash_after_steps`` the attempt that records that many steps freezes right
    after the last of them, as a worker that dies there."""

    def __init__(self, crash_after_steps: int | None = None) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []
        self.crash_after_steps = crash_after_steps
        self.crashed = asyncio.Event()

    async def emit(self, event_type: str, data: Any) -> int:
        self.events.append(json.loads(dumps(data)))
        self.cursor = len(self.events)
        return self.cursor

    async def record_step(self, name: str, result: Any, error_type: str | None) -> None:
        await super().record_step(name, result, error_type)
        if self.crash_after_steps is not None and len(self.steps) >= self.crash_after_steps:
            self.crashed.set()
            await asyncio.Event().wait()  # the "worker" freezes here until it is killed

    async def save_checkpoint(self, state: Any) -> None:
        raise AssertionError("the agent runtime records steps, not checkpoints")

    def checkpoint(self) -> Any:
        return None

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


PARKED = "parked"
"""What :func:`attempt` returns when the attempt parked on a wait instead of finishing."""


def attempt_context(
    sink: FakeSink, number: int = 1, *, recovery: bool = False
) -> InvocationContext:
    """Attempt ``number`` of invocation ``inv-1``, replaying whatever ``sink`` recorded."""
    return InvocationContext(
        invocation_id="inv-1",
        session_id=None,
        attempt=number,
        sink=sink,
        recorded=sink.recorded(),
        is_recovery=recovery,
    )


async def attempt(
    app: AgentApp, value: Any, sink: FakeSink, number: int = 1, *, recovery: bool = False
) -> Any:
    """Run one attempt as the worker would: its output, or :data:`PARKED`."""
    handler = app.handler_for(recovery)
    assert handler is not None
    try:
        return await handler(value, attempt_context(sink, number, recovery=recovery))
    except Suspend:
        return PARKED


async def crash_after(app: AgentApp, value: Any, steps: int) -> FakeSink:
    """Run attempt 1 until it has recorded ``steps`` steps, then kill it (cancel the task)."""
    sink = FakeSink(crash_after_steps=steps)
    task = asyncio.create_task(attempt(app, value, sink))
    await sink.crashed.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    sink.crash_after_steps = None
    return sink
