"""An MCP server of the session era (the ``initialize`` handshake, ``Mcp-Session-Id``) that lost
its sessions (it restarted, or expired an idle one: the SDK's servers do after 30 minutes)
answers a request naming one with 404, and MCP says the client must then start a new session.
The pooled connection is replaced, and the request, which the server never ran, is sent once
on the new session."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.agents.mcp_fixtures import (
    Asgi,
    McpTestServer,
    Receive,
    Scope,
    Send,
    Served,
    read_body,
    replaying,
)
from tether.agents.errors import ToolError
from tether.agents.mcp import McpConfig, McpHub, mcp_server
from tether.agents.mcp.credentials import Caller


class Forgetful:
    """The MCP test server's app as a session-era server (it refuses the modern era's
    ``server/discover`` probe, so the client falls back to ``initialize``), made to forget every
    session it made so far, as a restarted server does."""

    def __init__(self, app: Asgi) -> None:
        self.app = app
        self.sessions: set[bytes] = set()
        self.forgotten: set[bytes] = set()
        self.refused = 0

    def forget(self) -> None:
        self.forgotten |= self.sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            session = dict(scope["headers"]).get(b"mcp-session-id")
            if session in self.forgotten:
                self.refused += 1
                await send({"type": "http.response.start", "status": 404, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            if session is not None:
                self.sessions.add(session)
            if scope["method"] == "POST":
                body = await read_body(receive)
                if json.loads(body).get("method") == "server/discover":
                    await send({"type": "http.response.start", "status": 400, "headers": []})
                    await send({"type": "http.response.body", "body": b""})
                    return
                receive = replaying(body, receive)
        await self.app(scope, receive, send)


@pytest.fixture
def forgetful() -> Iterator[tuple[McpTestServer, Forgetful, str]]:
    notes = McpTestServer()
    app = Forgetful(notes.mcp.streamable_http_app(host="127.0.0.1"))
    served = Served(app)
    yield notes, app, f"http://127.0.0.1:{served.port}/mcp"
    served.stop()


async def test_a_server_that_forgot_the_session_gets_a_new_one(
    forgetful: tuple[McpTestServer, Forgetful, str],
) -> None:
    notes, app, url = forgetful
    hub = McpHub(McpConfig(allow_localhost=True))
    server = mcp_server("notes", url)
    call: Any = hub.call_tool
    try:
        assert await call(server, "add_note", {"text": "a"}, Caller()) == "noted: a"
        app.forget()  # every later call used to be refused "Session terminated", for good
        with pytest.raises(ToolError, match="ended its session"):  # not sent twice: it may
            await call(server, "add_note", {"text": "b"}, Caller())  # have run (another 404)
        assert await call(server, "add_note", {"text": "c"}, Caller()) == "noted: c"
        app.forget()
        assert "add_note" in {s.name for s in await hub.list_tools(server)}  # a listing is
        assert hub.open_servers() == ["notes"]  # asked again on the new session at once
    finally:
        await hub.aclose()
    assert notes.notes == ["a", "c"] and app.refused >= 2
