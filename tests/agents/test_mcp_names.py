"""Names a tool, an MCP server or an agent may take: exactly the allowed characters, no
trailing line break (Python's ``$`` matches before one). A name an MCP server lists is
untrusted input: one the model's API could not take is skipped and logged."""

from __future__ import annotations

import pytest

from tether.agents import create_agent, tool
from tether.agents.errors import DefinitionError
from tether.agents.mcp import McpConfig, McpHub, mcp_server
from tether.agents.mcp.agent_tools import mcp_function_tools
from tether.agents.mcp.credentials import Caller
from tether.agents.mcp.specs import McpToolSpec

READ = {"readOnlyHint": True}


def spec(name: str, server: str = "notes") -> McpToolSpec:
    return McpToolSpec(server, name, "A tool.", {"type": "object", "properties": {}}, READ)


@pytest.mark.parametrize("name", ["echo\n", "echo\r", "ec ho"])
def test_a_tool_name_with_a_line_break_or_a_space_is_not_usable(name: str) -> None:
    assert not spec(name).usable()


def test_names_with_a_trailing_line_break_are_refused_everywhere() -> None:
    with pytest.raises(DefinitionError, match="tool name"):
        tool(name="echo\n")(lambda: "x")
    with pytest.raises(DefinitionError, match="MCP server name"):
        mcp_server("notes\n", "https://mcp.example.com/mcp")
    with pytest.raises(DefinitionError, match="agent name"):
        create_agent("helper\n")


async def test_an_odd_tool_name_is_skipped_and_the_others_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hub = McpHub(McpConfig(allow_localhost=True))
    servers = [mcp_server("notes", "http://127.0.0.1:1/mcp")]
    specs = [spec("echo\n"), spec("list")]
    tools = mcp_function_tools("a", specs, servers, hub, Caller())
    assert list(tools) == ["mcp.notes.list"]
    assert "skipping MCP tool 'mcp.notes.echo\\n'" in caplog.text
