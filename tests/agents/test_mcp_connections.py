"""Before the first byte of every MCP connection: the policy, the vetted and pinned addresses,
and whose credentials go where (spec §5.3-§5.5). No test here connects to a private address:
every blocked range is proven with a resolver stub, and the connection code is watched to show
it never dials."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterable
from types import SimpleNamespace
from typing import Any

import httpcore2
import httpx2
import pytest

from tests.agents.mcp_fixtures import McpTestServer
from tests.agents.test_mcp_policy import BLOCKED, StubResolver
from tether.agents import DefinitionError, ToolError, create_agent, load_agents_dir, run_agent
from tether.agents.mcp import McpConfig, McpHub, mcp_server
from tether.agents.mcp.credentials import Caller
from tether.agents.mcp.transport import PinnedBackend, ScopedAuth, calling_as

SP = "Bearer service-principal"
USER = "Bearer the-caller"


class RecordingBackend(httpcore2.AsyncNetworkBackend):
    """Records every dial and refuses it: the stand-in for the network."""

    def __init__(self) -> None:
        self.dialed: list[tuple[str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        self.dialed.append((host, port))
        raise httpcore2.ConnectError("recorded")


@pytest.fixture
def dials(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every TCP connection any MCP connection attempts (they all fail)."""
    backend = RecordingBackend()
    monkeypatch.setattr(httpcore2.AnyIOBackend, "connect_tcp", backend.connect_tcp)
    return backend.dialed


@pytest.fixture
async def hubs() -> AsyncIterator[list[McpHub]]:
    made: list[McpHub] = []
    yield made
    for hub in made:
        await hub.aclose()


def user_auth(token: str = USER) -> Any:
    """What ``ctx.request_auth`` gives: ``client_for("user")`` → a client whose config
    authenticates as the caller."""
    config = SimpleNamespace(authenticate=lambda: {"Authorization": token})
    return SimpleNamespace(client_for=lambda who: SimpleNamespace(config=config))


async def service() -> str:
    return SP


@pytest.mark.parametrize("address", BLOCKED)
async def test_a_host_resolving_into_any_blocked_range_is_never_dialed(
    address: str, dials: list[tuple[str, int]], hubs: list[McpHub]
) -> None:
    resolver = StubResolver([address.strip("[]")])
    hub = McpHub(McpConfig(trusted_hosts=["mcp.example.com"], resolver=resolver))
    hubs.append(hub)
    server = mcp_server("ext", "https://mcp.example.com/mcp")
    with pytest.raises(ToolError, match="resolved to blocked address") as refused:
        await hub.call_tool(server, "anything", {}, Caller())
    assert "not allowed" in str(refused.value)
    assert resolver.asked == [("mcp.example.com", 443)] and dials == []
    assert await hub.list_tools(server) == [] and dials == []


async def test_a_split_answer_with_one_metadata_address_is_refused(
    dials: list[tuple[str, int]], hubs: list[McpHub]
) -> None:
    resolver = StubResolver(["203.0.113.7", "::ffff:169.254.169.254"])
    hubs.append(hub := McpHub(McpConfig(trusted_hosts=["mcp.example.com"], resolver=resolver)))
    with pytest.raises(ToolError, match="blocked address ::ffff:169.254.169.254"):
        await hub.call_tool(mcp_server("ext", "https://mcp.example.com/m"), "t", {}, Caller())
    assert dials == []


async def test_a_public_answer_is_dialed_at_the_vetted_address_only(
    dials: list[tuple[str, int]], hubs: list[McpHub]
) -> None:
    resolver = StubResolver(["203.0.113.7"])
    hubs.append(hub := McpHub(McpConfig(trusted_hosts=["mcp.example.com"], resolver=resolver)))
    with pytest.raises(ToolError, match="unavailable"):
        await hub.call_tool(mcp_server("ext", "https://mcp.example.com/m"), "t", {}, Caller())
    assert set(dials) == {("203.0.113.7", 443)}  # never the name: no second lookup


async def test_the_pinned_backend_dials_only_vetted_addresses_for_the_vetted_host() -> None:
    inner = RecordingBackend()
    backend = PinnedBackend("mcp.example.com", ["203.0.113.7"], allow_localhost=False, inner=inner)
    with pytest.raises(httpcore2.ConnectError):
        await backend.connect_tcp("mcp.example.com", 443)
    with pytest.raises(httpcore2.ConnectError, match="not the vetted MCP host"):
        await backend.connect_tcp("other.example.com", 443)
    blocked = PinnedBackend("h", ["169.254.169.254"], allow_localhost=True, inner=inner)
    with pytest.raises(httpcore2.ConnectError, match="blocked"):
        await blocked.connect_tcp("h", 443)
    assert inner.dialed == [("203.0.113.7", 443)]


async def test_a_loopback_name_goes_through_the_resolver_and_is_pinned(
    mcp_test_server: McpTestServer, hubs: list[McpHub]
) -> None:
    resolver = StubResolver(["127.0.0.1"])
    hubs.append(hub := McpHub(McpConfig(allow_localhost=True, resolver=resolver)))
    server = mcp_server("notes", f"http://localhost:{mcp_test_server.port}/mcp")
    assert await hub.call_tool(server, "add_note", {"text": "x"}, Caller()) == "noted: x"
    assert resolver.asked == [("localhost", mcp_test_server.port)]


async def test_no_credential_goes_to_a_host_that_is_not_the_workspace(
    mcp_test_server: McpTestServer, hubs: list[McpHub]
) -> None:
    hubs.append(hub := McpHub(McpConfig(allow_localhost=True, service_auth=service)))
    server = mcp_server("notes", mcp_test_server.url)
    await hub.list_tools(server)
    await hub.call_tool(server, "add_note", {"text": "x"}, Caller(user_auth()))
    assert mcp_test_server.seen and all(s.authorization is None for s in mcp_test_server.seen)


async def test_the_workspace_gets_the_service_principal_and_calls_go_as_the_caller(
    mcp_test_server: McpTestServer, hubs: list[McpHub]
) -> None:
    workspace = McpConfig(
        allow_localhost=True, workspace_host="http://127.0.0.1", service_auth=service
    )
    hubs.append(hub := McpHub(workspace))
    server = mcp_server("ws", mcp_test_server.url)
    assert hub.admit(server).forward_auth is True
    await hub.list_tools(server)
    await hub.call_tool(server, "add_note", {"text": "as user"}, Caller(user_auth()))
    await hub.call_tool(server, "add_note", {"text": "no user"}, Caller())
    seen = [(s.rpc_method, s.authorization) for s in mcp_test_server.seen if s.rpc_method]
    assert seen == [
        ("server/discover", SP),
        ("tools/list", SP),
        ("tools/call", USER),
        ("tools/call", SP),
    ]


async def test_an_on_behalf_of_user_agent_without_a_caller_is_refused_not_escalated(
    mcp_test_server: McpTestServer, hubs: list[McpHub]
) -> None:
    config = McpConfig(
        allow_localhost=True, workspace_host="http://127.0.0.1", service_auth=service
    )
    hubs.append(hub := McpHub(config))
    server = mcp_server("ws", mcp_test_server.url)
    with pytest.raises(ToolError, match="only as the requesting user"):
        await hub.call_tool(server, "add_note", {"text": "x"}, Caller(None, on_behalf_of_user=True))
    broken = SimpleNamespace(client_for=lambda who: (_ for _ in ()).throw(RuntimeError("tok123")))
    with pytest.raises(ToolError, match="credential is unavailable") as refused:
        await hub.call_tool(server, "add_note", {"text": "x"}, Caller(broken))
    assert "tok123" not in str(refused.value) and mcp_test_server.calls == {}


async def test_scoped_auth_sends_the_caller_only_on_tools_call() -> None:
    sent: list[tuple[str, str | None]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = request.content.decode() or "{}"
        sent.append((body, request.headers.get("authorization")))
        return httpx2.Response(200, json={})

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler), auth=ScopedAuth(service))
    async with client:
        with calling_as(USER):
            await client.post("http://ws/mcp", json={"method": "tools/call"})
            await client.post("http://ws/mcp", json={"method": "tools/list"})
            await client.get("http://ws/mcp")
        await client.post("http://ws/mcp", json={"method": "tools/call"})
    assert [auth for _, auth in sent] == [USER, SP, SP, SP]


def test_an_mcp_url_the_policy_refuses_stops_the_load(tmp_path: Any) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "agent.md").write_text(
        "---\nmcp:\n  evil: https://attacker.example.com/mcp\n---\nA."
    )
    with pytest.raises(DefinitionError, match="MCP server 'evil'.*attacker.example.com"):
        load_agents_dir(tmp_path)
    (tmp_path / "a" / "agent.md").write_text("---\nmcp:\n  dev: http://127.0.0.1:9/mcp\n---\nA.")
    with pytest.raises(DefinitionError, match="localhost is not allowed"):
        load_agents_dir(tmp_path)
    assert load_agents_dir(tmp_path, mcp=McpConfig(allow_localhost=True)).get("a").mcp_servers


@pytest.mark.parametrize(
    ("front", "error"),
    [
        ("mcp: [1]", "must be a URL or a mapping"),
        ("mcp: {'bad.name': 'http://127.0.0.1/m'}", "must match"),
        ("mcp: {a: {url: 'http://127.0.0.1/m', bogus: 1}}", "unknown key 'bogus'"),
        ("mcp: {a: {url: 'http://127.0.0.1/m', timeout: 0}}", "positive number"),
        ("mcp: {a: 'http://127.0.0.1/m'}\nmcp_servers: {b: 'http://127.0.0.1/m'}", "not both"),
        ("mcp_servers: [{name: a, url: 'http://127.0.0.1/m'}, {name: a, url: 'x'}]", "unique"),
        ("mcp: 3", "mapping or a list"),
    ],
)
def test_malformed_mcp_front_matter_is_an_error(tmp_path: Any, front: str, error: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "agent.md").write_text(f"---\n{front}\n---\nA.")
    with pytest.raises(DefinitionError, match=error):
        load_agents_dir(tmp_path, mcp=McpConfig(allow_localhost=True))


def test_both_front_matter_forms_declare_servers(tmp_path: Any) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "agent.md").write_text(
        "---\nmcp_servers:\n  - name: notes\n    url: http://127.0.0.1:1/mcp\n"
        "    tools: [list_notes]\n    timeout: 5\n---\nA."
    )
    registry = load_agents_dir(tmp_path, mcp=McpConfig(allow_localhost=True))
    [server] = registry.get("a").mcp_servers
    assert (server.name, server.tools, server.timeout_s) == ("notes", ("list_notes",), 5)


async def test_the_standalone_runner_refuses_mcp_agents_before_any_model_call() -> None:  # A4
    from tether.agents import ScriptedModel

    model = ScriptedModel.of("hi")
    agent = create_agent("a", model=model, mcp_servers=[mcp_server("n", "http://127.0.0.1:1/m")])
    with pytest.raises(DefinitionError, match="only supported in the server"):
        await run_agent(agent, "hi")
    assert model.requests == []


async def test_a_server_that_never_answers_the_handshake_is_unavailable(
    hubs: list[McpHub],
) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes TCP handshakes; nothing ever answers
    try:
        hubs.append(hub := McpHub(McpConfig(allow_localhost=True, connect_timeout_s=0.5)))
        port = silent.getsockname()[1]
        server = mcp_server("mute", f"http://127.0.0.1:{port}/mcp")
        with pytest.raises(ToolError, match="MCP server 'mute' is unavailable."):
            await hub.call_tool(server, "anything", {}, Caller())
        assert hub.open_servers() == []
    finally:
        silent.close()
