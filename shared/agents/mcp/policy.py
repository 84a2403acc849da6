"""Which MCP URLs an agent may connect to, and whether workspace credentials go there (§5.1-2).

Admitted: the workspace's own host over https (the only host that receives workspace
credentials); loopback hosts when localhost is allowed (no credentials); hosts trusted
explicitly, over https (no credentials). Plain http is refused everywhere but loopback. This is
checked when agents load and again before every connection, and every address a host resolves
to is then checked too (:mod:`.resolve`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from tether.agents.mcp.addresses import parse_ip
from tether.agents.mcp.errors import McpPolicyError

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]", "0:0:0:0:0:0:0:1"})


@dataclass(frozen=True, slots=True)
class McpHostPolicy:
    workspace_hostname: str | None = None
    trusted_hosts: frozenset[str] = frozenset()
    allow_localhost: bool = False


@dataclass(frozen=True, slots=True)
class Admission:
    """An admitted URL: where to connect, and whether workspace credentials may go there."""

    url: str
    hostname: str
    port: int
    forward_auth: bool


def workspace_hostname(workspace_host: str | None) -> str | None:
    """The lower-cased host name of a workspace URL (``https://`` assumed when bare)."""
    if workspace_host is None or not workspace_host.strip():
        return None
    text = workspace_host.strip()
    if "://" not in text:
        text = f"https://{text}"
    try:
        host = urlsplit(text).hostname
    except ValueError:
        host = None
    if not host or " " in host:
        raise McpPolicyError("Invalid workspace host for MCP policy")
    return host.lower()


def _trusted_host(entry: object) -> str:
    """A trusted host as URLs name it: stripped, lower-cased, an IPv6 literal unbracketed.
    A URL, a port or a path is refused: it could never match, and the host would be refused
    with a message saying to trust the very host the operator believes they trusted."""
    if not isinstance(entry, str):
        raise McpPolicyError(f"Trusted MCP host {entry!r} must be a host name (a string)")
    host = entry.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    bad = any(c in host for c in "/@?#[] \\") or (":" in host and parse_ip(host) is None)
    if bad:
        raise McpPolicyError(
            f"Trusted MCP host {entry.strip()!r} must be a bare host name, such as "
            "'mcp.example.com' (no scheme, port or path)"
        )
    return host


def build_policy(
    trusted_hosts: Iterable[str] = (),
    workspace_host: str | None = None,
    *,
    allow_localhost: bool = False,
) -> McpHostPolicy:
    """The policy (spec §5.1). Localhost is refused unless allowed: ``tether dev`` allows it."""
    if isinstance(trusted_hosts, str):
        raise McpPolicyError(
            "Trusted MCP hosts must be a list of host names, not one string "
            f"(trusted_hosts=[{trusted_hosts.strip()!r}])"
        )
    trusted = frozenset(
        _trusted_host(h) for h in trusted_hosts if not isinstance(h, str) or h.strip()
    )
    return McpHostPolicy(workspace_hostname(workspace_host), trusted, allow_localhost)


def is_loopback_host(host: str) -> bool:
    """A literal loopback host name (no DNS): ``localhost``, ``127.0.0.1``, ``::1``."""
    return host.strip().lower() in LOOPBACK_HOSTS


def absolute_url(url: str, policy: McpHostPolicy) -> str:
    """A path (``/api/2.0/mcp/…``) is on the workspace; anything else is taken as written."""
    if url.startswith("/") and not url.startswith("//"):
        if policy.workspace_hostname is None:
            raise McpPolicyError(f"MCP URL '{url}' is a path, but no workspace host is configured")
        return f"https://{policy.workspace_hostname}{url}"
    return url


def check_mcp_url(url: str, policy: McpHostPolicy) -> Admission:
    """Admit ``url`` or raise :class:`McpPolicyError` (spec §5.2), before any byte is sent."""
    try:
        parts = urlsplit(absolute_url(url, policy))
        port = parts.port
    except ValueError:
        raise McpPolicyError("MCP URL is not a valid absolute URL") from None
    scheme = parts.scheme.lower()
    if not scheme:
        raise McpPolicyError("MCP URL is not a valid absolute URL")
    if scheme not in ("http", "https"):
        raise McpPolicyError(f"MCP URL scheme '{scheme}:' is not allowed (use https)")
    host = (parts.hostname or "").lower()
    if not host:
        raise McpPolicyError("MCP URL is not a valid absolute URL")
    if parts.username is not None or parts.password is not None:
        raise McpPolicyError(f"MCP URL for '{host}' must not carry credentials")
    loopback = is_loopback_host(host)
    if loopback and not policy.allow_localhost:
        raise McpPolicyError(f"MCP host '{host}' refused: localhost is not allowed")
    if scheme == "http" and not loopback:
        raise McpPolicyError(f"MCP host '{host}' refused: plaintext http:// is only for loopback")
    port = port or (443 if scheme == "https" else 80)
    admitted = parts.geturl()
    if host == policy.workspace_hostname:
        return Admission(admitted, host, port, forward_auth=True)
    if loopback:
        return Admission(admitted, host, port, forward_auth=False)
    if host in policy.trusted_hosts:
        return Admission(admitted, host, port, forward_auth=False)
    workspace = policy.workspace_hostname or "<workspace host>"
    raise McpPolicyError(
        f"MCP host '{host}' is not allowed. Either use a same-origin workspace URL "
        f"(https://{workspace}/…) or add it to the trusted MCP hosts "
        f"(McpConfig(trusted_hosts=['{host}']))"
    )
