"""What an MCP connection writes to the log at the default level (INFO): nothing per request.
httpx2 logged every request's full URL (where an MCP server's key may sit: ``?api_key=…``, or
a path segment) and the SDK the session id, a bearer of the session, at INFO."""

from __future__ import annotations

import logging

import pytest

from tests.agents.mcp_fixtures import McpTestServer
from tether.agents.mcp import McpConfig, McpHub, mcp_server
from tether.agents.mcp.credentials import Caller


async def test_no_request_url_nor_session_is_logged_at_info(
    mcp_test_server: McpTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hub = McpHub(McpConfig(allow_localhost=True))
    server = mcp_server("notes", f"{mcp_test_server.url}?api_key=s3cret-key")
    try:
        assert await hub.call_tool(server, "add_note", {"text": "x"}, Caller()) == "noted: x"
    finally:
        await hub.aclose()
    assert "s3cret-key" not in caplog.text
    assert not [r for r in caplog.records if r.name.startswith(("httpx2", "mcp."))]
