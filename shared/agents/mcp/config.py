"""How a registry's agents reach MCP servers (no SDK import: agents without MCP never load it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

ServiceAuth = Callable[[], Awaitable[str | None]]
"""The service principal's ``Authorization`` value (None: send none)."""

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``(host, port) -> addresses``: the system's resolver in production, a stub in tests."""


@dataclass(frozen=True)
class McpConfig:
    """``trusted_hosts``: hosts admitted over https besides the workspace (no credentials sent);
    ``allow_localhost``: admit loopback servers over http (``tether dev`` turns it on; off by
    default); ``workspace_host``: the workspace (default ``DATABRICKS_HOST``), whose https URLs
    are admitted and get workspace credentials; ``resolver`` and ``service_auth`` replace the
    system resolver and databricks-sdk's credential chain (tests); ``connect_timeout_s`` bounds
    opening a session."""

    trusted_hosts: Sequence[str] = ()
    allow_localhost: bool = False
    workspace_host: str | None = None
    resolver: Resolver | None = None
    service_auth: ServiceAuth | None = None
    connect_timeout_s: float = 30.0
