"""Names a tool, an MCP server or an agent may take: exactly the allowed characters, no
trailing line break (Python's ``$`` matches before one). A name an MCP server lists is
untrusted input: one the model's API could not take, or one that collides with another tool
once dots become ``__`` on the wire, is skipped (and logged) so that the agent's other tools,
and its runs, go on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from databricks.sdk.config import Config
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from tests.agents.conftest import FakeModelServer, FakeSink, attempt, chat_chunk
from tests.agents.mcp_fixtures import Served
from tether.agents import (
    AgentRegistry,
    ScriptedModel,
    build_agent_app,
    create_agent,
    from_model_serving,
    tool,
)
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


def test_a_tool_name_over_64_characters_on_the_wire_is_not_usable() -> None:
    """``mcp.notes.<54 characters>`` is 64 characters, but ``mcp__notes__<54>`` is 66 on the
    wire, where model APIs cap function names at 64: every model call would be refused."""
    assert spec("x" * 52).usable()  # 62 -> 64 on the wire
    assert not spec("x" * 54).usable()
    assert not spec("a.b." + "x" * 48).usable()  # 62, but 68 on the wire


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


async def test_two_tools_with_one_wire_name_keep_the_first_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hub = McpHub(McpConfig(allow_localhost=True))
    servers = [mcp_server("notes", "http://127.0.0.1:1/mcp")]
    specs = [spec("get.user"), spec("get__user"), spec("list"), spec("own")]
    taken = ["mcp__notes__list", "mcp.notes.own"]  # the agent's own tools
    tools = mcp_function_tools("a", specs, servers, hub, Caller(), taken=taken)
    assert list(tools) == ["mcp.notes.get.user", "mcp.notes.own"]  # the same name replaces
    assert "mcp.notes.get__user" in caplog.text and "mcp.notes.list" in caplog.text


@pytest.fixture
def odd_server() -> Iterator[Served]:
    """An MCP server whose tools ``get.user`` and ``get__user`` are one name on the wire."""
    server = MCPServer("odd")

    @server.tool(name="get.user", annotations=ToolAnnotations(readOnlyHint=True))
    def dotted() -> str:
        return "dotted"

    @server.tool(name="get__user", annotations=ToolAnnotations(readOnlyHint=True))
    def underscored() -> str:
        return "underscored"

    served = Served(server.streamable_http_app(host="127.0.0.1"))
    yield served
    served.stop()


async def test_a_server_listing_colliding_names_does_not_fail_every_run(
    odd_server: Served, server: FakeModelServer, config: Config
) -> None:
    server.reply(chat_chunk("hello"), "data: [DONE]\n\n")
    url = f"http://127.0.0.1:{odd_server.port}/mcp"
    model = from_model_serving("my-endpoint", config=config)
    agent = create_agent("a", "Hi.", model=model, mcp_servers=[mcp_server("odd", url)])
    hub = McpHub(McpConfig(allow_localhost=True))
    try:
        app = build_agent_app(AgentRegistry.of([agent], mcp=hub))
        result = await attempt(app, "hi", FakeSink())
    finally:
        await hub.aclose()
    assert result["text"] == "hello"
    offered = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert offered == ["mcp__odd__get__user"]


@pytest.fixture
def unstorable_server() -> Iterator[Served]:
    """An MCP server whose listing holds what no store can: NUL characters."""
    server = MCPServer("odd")

    @server.tool(
        name="find", description="Finds\x00 things.", annotations=ToolAnnotations(readOnlyHint=True)
    )
    def find(query: str) -> str:
        return f"found {query}"

    @server.tool(name="bad\x00name", description="An odd name.")
    def odd() -> str:
        return "odd"

    served = Served(server.streamable_http_app(host="127.0.0.1"))
    yield served
    served.stop()


async def test_a_listing_no_store_can_hold_is_recorded_with_replacements(
    unstorable_server: Served,
) -> None:
    """The listing is the step ``<agent>#mcp``: a NUL in one description made every run of the
    agent fail (``InvalidJson``) before its first model call."""
    url = f"http://127.0.0.1:{unstorable_server.port}/mcp"
    model = ScriptedModel.of(
        {"tool_calls": [{"name": "mcp.odd.find", "args": {"query": "x"}}]}, "{result}"
    )
    agent = create_agent("a", "Hi.", model=model, mcp_servers=[mcp_server("odd", url)])
    hub = McpHub(McpConfig(allow_localhost=True))
    try:
        app = build_agent_app(AgentRegistry.of([agent], mcp=hub))
        result = await attempt(app, "hi", FakeSink())
    finally:
        await hub.aclose()
    assert result["text"] == "found x"
    [offered] = model.requests[0].tools
    assert (offered.name, offered.description) == ("mcp.odd.find", "Finds\ufffd things.")


def test_a_structured_result_holding_a_nul_is_the_result_with_a_replacement() -> None:
    """The call ran (its side effects are done): a NUL in its structured content (and no text
    block) raised InvalidJson, and the model read 'failed', and might call it again."""
    from mcp.types import CallToolResult

    from tether.agents.mcp.connection import outcome_of

    result = CallToolResult(content=[], structured_content={"a": "x\x00y"})
    assert outcome_of(result).text == '{"a":"x\ufffdy"}'
