"""The MCP side of a registry: its host policy and its pool of connections, one per server.

Connections are opened on first use, shared by every agent and run that uses the same server,
reopened after the server went away or forgot the session, and closed when the app shuts down
(:meth:`McpHub.aclose`, registered by ``build_agent_app``). Each event loop has its own pool: a
session belongs to the loop that opened it. The MCP SDK is imported on the first connection
only, so agents without MCP servers never load it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tether.agents.errors import ToolError
from tether.agents.mcp.config import McpConfig
from tether.agents.mcp.credentials import Caller, caller_authorization, databricks_service_auth
from tether.agents.mcp.errors import McpPolicyError, McpRefused, McpSessionLost, McpUnavailable
from tether.agents.mcp.policy import (
    Admission,
    McpHostPolicy,
    build_policy,
    check_mcp_url,
    workspace_hostname,
)
from tether.agents.mcp.resolve import assert_resolved_host_safe, system_resolver
from tether.agents.mcp.servers import McpServer
from tether.agents.mcp.specs import CallOutcome, McpToolSpec

if TYPE_CHECKING:
    from tether.agents.mcp.connection import McpConnection

log = logging.getLogger(__name__)


@dataclass
class _Pool:
    connections: dict[str, McpConnection] = field(default_factory=dict)
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)


def _policy(config: McpConfig) -> McpHostPolicy:
    workspace = config.workspace_host
    if workspace is None and os.environ.get("DATABRICKS_HOST"):
        try:
            workspace_hostname(os.environ["DATABRICKS_HOST"])
            workspace = os.environ["DATABRICKS_HOST"]
        except McpPolicyError:
            log.warning("DATABRICKS_HOST is not a valid workspace URL; MCP ignores it")
    return build_policy(config.trusted_hosts, workspace, allow_localhost=config.allow_localhost)


class McpHub:
    """Admits, connects to, lists and calls an agent registry's MCP servers."""

    def __init__(self, config: McpConfig | None = None) -> None:
        self.config = config or McpConfig()
        self.policy = _policy(self.config)
        self._resolver = self.config.resolver or system_resolver
        host = self.policy.workspace_hostname
        self._service = self.config.service_auth or databricks_service_auth(
            f"https://{host}" if host else None
        )
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = (
            weakref.WeakKeyDictionary()
        )
        self._listed: dict[str, list[McpToolSpec]] = {}

    def admit(self, server: McpServer) -> Admission:
        """The policy's verdict on the server's URL; raises :class:`McpPolicyError`."""
        return check_mcp_url(server.url, self.policy)

    def _pool(self) -> _Pool:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = _Pool()
        return pool

    async def connection(self, server: McpServer) -> McpConnection:
        """An open session to the server; raises :class:`McpPolicyError` or
        :class:`McpUnavailable`. The policy is checked again before every new connection."""
        admission = self.admit(server)
        pool = self._pool()
        lock = pool.locks.setdefault(admission.url, asyncio.Lock())
        async with lock:
            current = pool.connections.get(admission.url)
            if current is not None and current.usable:
                return current
            if current is not None:
                await current.aclose()  # e.g. a session the server forgot: its owner ends
            addresses = await assert_resolved_host_safe(
                admission.hostname, self.policy, self._resolver, admission.port
            )
            from tether.agents.mcp.connection import McpConnection  # the SDK, on first use
            from tether.agents.mcp.transport import PinnedBackend

            backend = PinnedBackend(
                admission.hostname, addresses, allow_localhost=self.policy.allow_localhost
            )
            connection = McpConnection(
                server.name, admission, backend, self._service, server.timeout_s
            )
            await connection.open(self.config.connect_timeout_s)
            pool.connections[admission.url] = connection
            return connection

    async def list_tools(self, server: McpServer) -> list[McpToolSpec]:
        """The server's tools (those ``server.tools`` names, if set), under ``server``'s name:
        agents may name one URL differently, and share its connection. When the server cannot be
        listed, the last listing this process saw, or none; the failure is logged."""
        try:
            listed = self._listed[server.url] = await self._list(server)
        except McpPolicyError as exc:
            log.warning("MCP server '%s' refused by the host policy: %s", server.name, exc)
            return []
        except McpUnavailable:
            log.warning("MCP server '%s' is unavailable: its tools are not listed", server.name)
            listed = self._listed.get(server.url, [])
        specs = [replace(s, server=server.name) for s in listed]
        if server.tools is not None:
            specs = [s for s in specs if s.name in server.tools]
        return specs

    async def _list(self, server: McpServer) -> list[McpToolSpec]:
        try:
            return await (await self.connection(server)).list_tools()
        except McpSessionLost:  # MCP: start a new session, and ask again there
            return await (await self.connection(server)).list_tools()

    async def _call(
        self, server: McpServer, tool: str, args: dict[str, Any], caller: Caller
    ) -> CallOutcome:
        connection = await self.connection(server)
        authorization = None
        if connection.admission.forward_auth:
            authorization = await caller_authorization(caller, server.name)
        return await asyncio.wait_for(
            connection.call_tool(tool, args, server.timeout_s, authorization), server.timeout_s
        )

    async def call_tool(
        self, server: McpServer, tool: str, args: dict[str, Any], caller: Caller
    ) -> str:
        """One ``tools/call``; every failure is a :class:`ToolError` the model reads. A call
        that failed once the server forgot the session is not sent again (the 404 may have
        answered another request of the session, and this one may have run): the next call
        opens a new session."""
        try:
            outcome = await self._call(server, tool, args, caller)
        except McpSessionLost:
            raise ToolError(
                f"MCP server '{server.name}' ended its session; the call may not have run. "
                "Call it again if needed."
            ) from None
        except McpPolicyError as exc:
            raise ToolError(f"MCP server '{server.name}' is not allowed: {exc}") from None
        except TimeoutError:
            raise ToolError(
                f"MCP tool '{tool}' on server '{server.name}' timed out after "
                f"{server.timeout_s:g}s."
            ) from None
        except McpRefused as exc:
            raise ToolError(f"MCP server '{server.name}' refused the call: {exc}") from None
        except McpUnavailable as exc:
            raise ToolError(str(exc)) from None
        if outcome.is_error:
            raise ToolError(outcome.text)
        return outcome.text

    def open_servers(self) -> list[str]:
        """The names of the servers with an open session on this loop."""
        pool = self._pools.get(asyncio.get_running_loop())
        return sorted(c.name for c in pool.connections.values() if c.usable) if pool else []

    async def aclose(self) -> None:
        """Close this loop's connections (the others belong to loops that are gone)."""
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await asyncio.gather(*(c.aclose() for c in pool.connections.values()))
