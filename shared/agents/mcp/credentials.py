"""Whose credentials an MCP request carries (spec §5.5); only ever the workspace's own host.

Discovery and ``tools/list`` go as the service principal (databricks-sdk's credential chain).
A ``tools/call`` goes as the caller when the invocation carries the caller's credential
(``ctx.request_auth`` with a user); with none, as the service principal, except for an agent
declared ``auth: on-behalf-of-user`` (without ``resumeWithoutUser``), whose calls are refused
rather than silently run with more rights: a caller's credential lives only in the memory of
the process that accepted the request, so a replacement attempt elsewhere has none.
Credentials are read when a request needs them, never logged, never recorded.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from tether.agents.errors import ToolError
from tether.agents.mcp.config import ServiceAuth

log = logging.getLogger(__name__)

AUTHORIZATION = "Authorization"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who runs a tool call: the invocation's ``request_auth`` (None: no caller credential)
    and whether the agent may only act as the caller."""

    request_auth: Any = None
    on_behalf_of_user: bool = False


def _user_authorization(request_auth: Any) -> str | None:
    client = request_auth.client_for("user")
    headers = client.config.authenticate()
    value = headers.get(AUTHORIZATION) if isinstance(headers, dict) else None
    return value if isinstance(value, str) and value else None


async def caller_authorization(caller: Caller, server: str) -> str | None:
    """The caller's ``Authorization`` value for a ``tools/call``, or None (the service
    principal's then goes); raises :class:`ToolError` when the call may not go as anyone."""
    auth = caller.request_auth
    if auth is None or not getattr(auth, "has_user", True):
        if caller.on_behalf_of_user:
            raise ToolError(
                f"MCP server '{server}': this agent calls tools only as the requesting user, "
                "and this run has no user credential (a recovered run never has one)."
            )
        return None
    try:
        value = await asyncio.to_thread(_user_authorization, auth)
    except Exception as exc:  # the credential source's failure: its type logged, never its text
        log.warning(
            "MCP server '%s': the caller's credential failed (%s)", server, type(exc).__name__
        )
        value = None
    if value is None:
        raise ToolError(f"MCP server '{server}': the caller's credential is unavailable.")
    return value


def databricks_service_auth(workspace_host: str | None) -> ServiceAuth:
    """The service principal's ``Authorization`` from databricks-sdk's credential chain, built
    on first use (off the event loop: it may probe the host or refresh a token)."""
    config: Any = None

    def authorization() -> str | None:
        nonlocal config
        if config is None:
            from databricks.sdk.config import Config

            config = Config(host=workspace_host) if workspace_host else Config()
        headers = config.authenticate()
        value = headers.get(AUTHORIZATION) if isinstance(headers, dict) else None
        return value if isinstance(value, str) and value else None

    async def service() -> str | None:
        return await asyncio.to_thread(authorization)

    return service
