"""Resolving an admitted MCP host and vetting every address it gives (spec §5.3).

An IP literal is checked as is (no lookup). ``localhost`` needs localhost allowed. Any other
name is resolved, and **every** address must pass :func:`is_blocked_ip`, so a name with one
public and one metadata address is refused. The vetted addresses are what the connection then
dials (:mod:`.transport`): the name is never resolved a second time, so a DNS answer that changes
between the check and the connect (rebinding) cannot redirect the connection.
"""

from __future__ import annotations

import asyncio
import socket

from tether.agents.mcp.addresses import is_blocked_ip, parse_ip
from tether.agents.mcp.config import Resolver
from tether.agents.mcp.errors import McpPolicyError
from tether.agents.mcp.policy import McpHostPolicy


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, in the resolver's order, without duplicates."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def assert_resolved_host_safe(
    host: str, policy: McpHostPolicy, resolver: Resolver, port: int = 443
) -> list[str]:
    """The addresses a connection to ``host`` may dial; raises :class:`McpPolicyError`."""
    if parse_ip(host) is not None:
        if is_blocked_ip(host, policy.allow_localhost):
            raise McpPolicyError(f"MCP host '{host}' is in a blocked IP range")
        return [str(parse_ip(host))]
    if host.lower() == "localhost" and not policy.allow_localhost:
        raise McpPolicyError("MCP host 'localhost' refused: localhost is not allowed")
    try:
        addresses = await resolver(host, port)
    except (OSError, UnicodeError):
        raise McpPolicyError(f"MCP host '{host}' could not be resolved") from None
    if not addresses:
        raise McpPolicyError(f"MCP host '{host}' returned no DNS addresses")
    for address in addresses:
        if is_blocked_ip(address, policy.allow_localhost):
            raise McpPolicyError(f"MCP host '{host}' resolved to blocked address {address}")
    return list(addresses)
