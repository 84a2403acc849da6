"""MCP tools (spec §5): an agent's MCP servers, reached under a host policy, on the official SDK.

An agent names streamable-HTTP MCP servers (``mcp:`` in front matter, ``mcp_servers=`` in code);
their tools become the agent's tools ``mcp.<server>.<tool>``, with their annotations (so
destructive ones wait for approval). Before the first byte of every connection the URL must be
admitted (:mod:`.policy`) and every address its host resolves to must be outside the blocked
ranges (:mod:`.addresses`, :mod:`.resolve`); the connection then dials only those addresses
(:mod:`.transport`). Workspace credentials go to the workspace host only (:mod:`.credentials`).
"""

from tether.agents.mcp.addresses import is_blocked_ip
from tether.agents.mcp.config import McpConfig
from tether.agents.mcp.errors import McpPolicyError, McpRefused, McpUnavailable
from tether.agents.mcp.hub import McpHub
from tether.agents.mcp.policy import (
    Admission,
    McpHostPolicy,
    build_policy,
    check_mcp_url,
    is_loopback_host,
)
from tether.agents.mcp.resolve import assert_resolved_host_safe, system_resolver
from tether.agents.mcp.servers import McpServer, mcp_server

__all__ = [
    "Admission",
    "McpConfig",
    "McpHostPolicy",
    "McpHub",
    "McpPolicyError",
    "McpRefused",
    "McpServer",
    "McpUnavailable",
    "assert_resolved_host_safe",
    "build_policy",
    "check_mcp_url",
    "is_blocked_ip",
    "is_loopback_host",
    "mcp_server",
    "system_resolver",
]
