"""An MCP server's answer the SDK cannot read: the model reads a fixed text naming the server
and the tool, never the parser's exception (pydantic's report, with a piece of the body and a
link to its docs); the details go to the log by type."""

from __future__ import annotations

import json
from collections.abc import Iterator

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
from tether.agents import ToolError
from tether.agents.mcp import McpConfig, McpHub, mcp_server
from tether.agents.mcp.credentials import Caller


class Garbled:
    """The MCP test server's app, answering every ``tools/call`` with a body that is no JSON."""

    def __init__(self, app: Asgi) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body = await read_body(receive)
            if json.loads(body).get("method") == "tools/call":
                headers = [(b"content-type", b"application/json")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": b"secret-ish not json"})
                return
            receive = replaying(body, receive)
        await self.app(scope, receive, send)


@pytest.fixture
def garbled() -> Iterator[str]:
    served = Served(Garbled(McpTestServer().mcp.streamable_http_app(host="127.0.0.1")))
    yield f"http://127.0.0.1:{served.port}/mcp"
    served.stop()


async def test_an_unreadable_answer_is_a_fixed_tool_error(garbled: str) -> None:
    hub = McpHub(McpConfig(allow_localhost=True))
    try:
        with pytest.raises(ToolError) as failed:
            await hub.call_tool(mcp_server("notes", garbled), "add_note", {"text": "x"}, Caller())
    finally:
        await hub.aclose()
    assert (
        str(failed.value)
        == "MCP server 'notes' sent an answer to 'add_note' that could not be read."
    )
