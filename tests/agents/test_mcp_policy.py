"""The MCP host policy (spec §5.1-§5.4, cases M1-M15): URLs, blocked ranges, resolution."""

from __future__ import annotations

import pytest

from tether.agents.mcp import (
    McpHostPolicy,
    McpPolicyError,
    assert_resolved_host_safe,
    build_policy,
    check_mcp_url,
    is_blocked_ip,
    is_loopback_host,
)

WORKSPACE = "https://test-workspace.cloud.databricks.com"


def policy(*, allow_localhost: bool = False, trusted: tuple[str, ...] = ()) -> McpHostPolicy:
    return build_policy(trusted, WORKSPACE, allow_localhost=allow_localhost)


@pytest.mark.parametrize(
    "url",
    [
        "https://test-workspace.cloud.databricks.com/api/2.0/mcp/genie/abc",
        "https://TEST-Workspace.CLOUD.databricks.com/api/2.0/mcp/genie/abc",
    ],
)
def test_a_workspace_url_is_admitted_with_workspace_credentials(url: str) -> None:  # M1
    admitted = check_mcp_url(url, policy())
    assert admitted.forward_auth is True
    assert admitted.hostname == "test-workspace.cloud.databricks.com"


def test_a_workspace_path_is_on_the_workspace_host() -> None:
    admitted = check_mcp_url("/api/2.0/mcp/genie/abc", policy())
    assert admitted.url == f"{WORKSPACE}/api/2.0/mcp/genie/abc" and admitted.forward_auth


def test_a_path_without_a_workspace_is_refused() -> None:
    with pytest.raises(McpPolicyError, match="no workspace host"):
        check_mcp_url("/api/2.0/mcp/x", build_policy())


def test_a_trusted_host_is_admitted_without_credentials_but_never_over_http() -> None:  # M2
    trusted = policy(trusted=("mcp.example.com",))
    assert check_mcp_url("https://mcp.example.com/mcp", trusted).forward_auth is False
    with pytest.raises(McpPolicyError, match="plaintext http"):
        check_mcp_url("http://mcp.example.com/mcp", trusted)


def test_an_unknown_host_is_refused_with_a_reason_naming_it() -> None:  # M3
    with pytest.raises(McpPolicyError) as refused:
        check_mcp_url("https://attacker.example.com/mcp", policy())
    assert "attacker.example.com" in str(refused.value)
    assert "trusted_hosts" in str(refused.value)


def test_localhost_is_admitted_only_when_allowed_and_never_with_credentials() -> None:  # M4
    with pytest.raises(McpPolicyError):
        check_mcp_url("http://localhost:4000/mcp", policy())
    for url in ("http://localhost:4000/mcp", "http://127.0.0.1:4000/mcp", "http://[::1]:4000/m"):
        admitted = check_mcp_url(url, policy(allow_localhost=True))
        assert admitted.forward_auth is False


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://host/x",
        "gopher://host/x",
        "javascript:alert(1)",
        "not-a-url",
        "https://",
        "https://host:99999/x",
        "https://user:secret@mcp.example.com/mcp",
    ],
)
def test_other_schemes_and_malformed_urls_are_refused(url: str) -> None:  # M5
    with pytest.raises(McpPolicyError) as refused:
        check_mcp_url(url, policy(allow_localhost=True, trusted=("mcp.example.com",)))
    assert "secret" not in str(refused.value)


def test_plain_http_is_refused_even_for_the_workspace() -> None:  # M6
    with pytest.raises(McpPolicyError, match="plaintext http"):
        check_mcp_url("http://test-workspace.cloud.databricks.com/mcp", policy())


BLOCKED_V4 = [
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.0.1",
    "192.168.255.255",
    "169.254.169.254",
    "169.254.0.1",
    "100.64.0.1",
    "100.127.255.255",
    "0.0.0.0",
    "0.1.2.3",
    "224.0.0.1",
    "255.255.255.255",
]
BLOCKED_V6 = ["fc00::1", "fd00::1", "fe80::1", "fe90::1", "fea0::1", "feaf::1", "feb0::1"]
BLOCKED_V6 += ["febf::1", "ff02::1", "::", "[fe80::1]"]
BLOCKED_MAPPED = [
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "::ffff:a9fe:a9fe",
    "::ffff:0a00:0001",
    "::ffff:c0a8:0001",
    "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata address (beyond the reference)
    "2002:a9fe:a9fe::1",  # 6to4 of it
    "::169.254.169.254",  # IPv4-compatible
]
BLOCKED = BLOCKED_V4 + BLOCKED_V6 + BLOCKED_MAPPED


@pytest.mark.parametrize("address", BLOCKED)
def test_every_blocked_range_is_blocked_even_with_localhost_allowed(address: str) -> None:
    assert is_blocked_ip(address, allow_localhost=True)  # M7, M9, M10
    assert is_blocked_ip(address, allow_localhost=False)


@pytest.mark.parametrize("address", ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"])
def test_loopback_is_blocked_unless_localhost_is_allowed(address: str) -> None:  # M8
    assert is_blocked_ip(address, allow_localhost=False)
    assert not is_blocked_ip(address, allow_localhost=True)


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2001:4860:4860::8888", "::ffff:0808:0808", "fec0::1"]
)
def test_public_addresses_are_allowed(address: str) -> None:  # M9 (fec0), M10, M11
    assert not is_blocked_ip(address, allow_localhost=False)


@pytest.mark.parametrize("text", ["10.0.0", "abc.def.ghi.jkl", "", "1.2.3.4.5"])
def test_what_is_not_an_ip_address_is_blocked(text: str) -> None:  # M12
    assert is_blocked_ip(text, allow_localhost=True)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST", True),
        ("127.0.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("0:0:0:0:0:0:0:1", True),
        ("example.com", False),
        ("10.0.0.1", False),
    ],
)
def test_loopback_hosts_are_named_literally(host: str, loopback: bool) -> None:  # M13
    assert is_loopback_host(host) is loopback


class StubResolver:
    """Answers from a table and records what it was asked; never touches DNS."""

    def __init__(self, answers: list[str] | Exception) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        if isinstance(self.answers, Exception):
            raise self.answers
        return list(self.answers)


async def test_a_public_answer_is_vetted_and_returned() -> None:  # M14
    resolver = StubResolver(["203.0.113.42"])
    vetted = await assert_resolved_host_safe("mcp.example.com", policy(), resolver)
    assert vetted == ["203.0.113.42"] and resolver.asked == [("mcp.example.com", 443)]


@pytest.mark.parametrize(
    "answers",
    [["169.254.169.254"], ["10.0.0.1"], ["8.8.8.8", "169.254.169.254"], ["8.8.8.8", "fd00::1"]],
)
async def test_any_blocked_answer_refuses_the_host(answers: list[str]) -> None:  # M14
    with pytest.raises(McpPolicyError, match="resolved to blocked address"):
        await assert_resolved_host_safe("mcp.example.com", policy(), StubResolver(answers))


async def test_an_ip_literal_is_checked_without_a_lookup() -> None:  # M14
    resolver = StubResolver(["8.8.8.8"])
    with pytest.raises(McpPolicyError, match="blocked IP range"):
        await assert_resolved_host_safe("169.254.169.254", policy(), resolver)
    assert resolver.asked == []


async def test_localhost_needs_localhost_allowed_and_lookup_failures_refuse() -> None:  # M14
    with pytest.raises(McpPolicyError, match="localhost is not allowed"):
        await assert_resolved_host_safe("localhost", policy(), StubResolver(["127.0.0.1"]))
    with pytest.raises(McpPolicyError, match="could not be resolved"):
        await assert_resolved_host_safe("x.example.com", policy(), StubResolver(OSError("nx")))
    with pytest.raises(McpPolicyError, match="no DNS addresses"):
        await assert_resolved_host_safe("x.example.com", policy(), StubResolver([]))


def test_building_the_policy() -> None:  # M15
    built = build_policy(["Example.COM", " corp.internal ", ""], WORKSPACE)
    assert built.trusted_hosts == {"example.com", "corp.internal"}
    assert built.workspace_hostname == "test-workspace.cloud.databricks.com"
    assert build_policy().allow_localhost is False  # hardening: off unless asked (tether dev)
    assert build_policy(allow_localhost=True).allow_localhost is True
    assert build_policy(workspace_host="dbc-1.cloud.databricks.com").workspace_hostname == (
        "dbc-1.cloud.databricks.com"
    )
    with pytest.raises(McpPolicyError, match="Invalid workspace host"):
        build_policy(workspace_host="not a url")


@pytest.mark.parametrize(
    "host", ["2852039166", "0251.0376.0251.0376", "0xa9fea9fe", "169.254.43518", "0x7f.1", "127.1"]
)
async def test_other_spellings_of_an_ipv4_address_are_vetted_as_what_they_reach(host: str) -> None:
    """Decimal, octal, hex and short forms are no IP literal to ``ipaddress`` but the system
    resolver reads them as one (no DNS query): whatever they reach is what is checked."""
    from tether.agents.mcp.resolve import system_resolver

    trusted = policy(trusted=(host,))
    assert check_mcp_url(f"https://{host}/mcp", trusted).forward_auth is False
    with pytest.raises(McpPolicyError, match="resolved to blocked address"):
        await assert_resolved_host_safe(host, trusted, system_resolver)
