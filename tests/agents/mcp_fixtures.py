"""A real MCP server (the official SDK's ``MCPServer``) on 127.0.0.1 for the MCP tests.

It runs under uvicorn on a thread with its own event loop, records every HTTP request it gets
(the JSON-RPC method and the ``Authorization`` header) and counts tool calls, so tests can say
what reached the server and as whom.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Seen:
    http_method: str
    rpc_method: str | None
    authorization: str | None


class McpTestServer:
    """Tools: ``add_note`` (write), ``list_notes`` (read-only), ``wipe`` (destructive), ``boom``
    (reports an error), ``slow`` (answers after 30 s) and ``unannotated``."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.seen: list[Seen] = []
        self.notes: list[str] = []
        self.port = 0
        self._served: Served | None = None
        self.mcp = self._build()

    def _build(self) -> MCPServer:
        server = MCPServer("notes")

        @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
        def add_note(text: str) -> str:
            """Add a note."""
            self.calls["add_note"] += 1
            self.notes.append(text)
            return f"noted: {text}"

        @server.tool(annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
        def list_notes() -> list[str]:
            """List the notes."""
            self.calls["list_notes"] += 1
            return list(self.notes)

        @server.tool(annotations=ToolAnnotations(destructiveHint=True))
        def wipe() -> str:
            """Delete every note."""
            self.calls["wipe"] += 1
            self.notes.clear()
            return "wiped"

        @server.tool()
        def boom() -> str:
            """Always fails."""
            self.calls["boom"] += 1
            raise ToolError("the notes store is read-only today")

        @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
        async def slow() -> str:
            """Answers only when released (never, in the timeout test)."""
            self.calls["slow"] += 1
            await anyio.sleep(30)
            return "late"

        @server.tool()
        def unannotated() -> str:
            """No annotations at all."""
            self.calls["unannotated"] += 1
            return "ok"

        return server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def rpc_methods(self) -> list[str | None]:
        return [s.rpc_method for s in self.seen if s.http_method == "POST"]

    def _recording(self, app: Asgi) -> Asgi:
        async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            auth = headers.get("authorization")
            if scope["method"] != "POST":
                self.seen.append(Seen(scope["method"], None, auth))
            body: list[bytes] = []

            async def recording_receive() -> Message:
                message = await receive()
                if message["type"] == "http.request":
                    body.append(message.get("body", b""))
                    if not message.get("more_body"):
                        self.seen.append(Seen("POST", _method(b"".join(body)), auth))
                return message

            await app(scope, recording_receive, send)

        return wrapped

    def start(self) -> None:
        self._served = Served(self._recording(self.mcp.streamable_http_app(host="127.0.0.1")))
        self.port = self._served.port

    def stop(self) -> None:
        if self._served is not None:
            self._served.stop()


class Served:
    """An ASGI app under uvicorn on 127.0.0.1 (a free port), on a thread with its own loop."""

    def __init__(self, app: Asgi) -> None:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="error", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="mcp-test", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.01)
        self.port: int = self._server.servers[0].sockets[0].getsockname()[1]

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


async def read_body(receive: Receive) -> bytes:
    """A request's whole body, read from ``receive``."""
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


def replaying(body: bytes, then: Receive) -> Receive:
    """A ``receive`` giving ``body`` again, then what ``then`` gives (a disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await then()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _method(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data.get("method") if isinstance(data, dict) else None
