"""An agent run's MCP tools: listed once per run (a durable step), called as function tools.

The listing is the step ``<agent>#mcp``: a replay offers the model the tools the first attempt
listed, without asking the servers again. Each tool is a function tool whose call is an ordinary
tool-call step, so a recorded ``tools/call`` is never sent again; the approval gate reads its
annotations like any tool's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from tether.agents.definitions import AgentDefinition, reachable
from tether.agents.errors import DefinitionError
from tether.agents.mcp.credentials import Caller
from tether.agents.mcp.errors import McpPolicyError
from tether.agents.mcp.hub import McpHub
from tether.agents.mcp.servers import McpServer
from tether.agents.mcp.specs import McpToolSpec
from tether.agents.steps import StepLog
from tether.agents.tools import FunctionTool, wire_name
from tether.jsonvalue import storable

log = logging.getLogger(__name__)


def admit_servers(agents: Sequence[AgentDefinition], hub: McpHub) -> None:
    """Check every agent's MCP URLs against the host policy when the registry loads."""
    for agent in agents:
        for server in agent.mcp_servers:
            try:
                hub.admit(server)
            except McpPolicyError as exc:
                raise DefinitionError(f"{agent.where}: MCP server '{server.name}': {exc}") from None


def forwards_workspace_auth(hub: McpHub, agent: AgentDefinition) -> bool:
    """Whether ``agent`` (or a sub-agent) uses an MCP server that gets workspace credentials,
    so the run should have the caller's credentials when the request carries them."""
    for each in reachable([agent]):
        for server in each.mcp_servers:
            try:
                if hub.admit(server).forward_auth:
                    return True
            except McpPolicyError:
                continue
    return False


async def recorded_mcp_tools(
    agent: str,
    servers: Sequence[McpServer],
    hub: McpHub | None,
    steps: StepLog,
    step: str,
) -> list[McpToolSpec]:
    """The tools of ``servers``, listed by the first attempt (nothing recorded without any)."""
    if not servers:
        return []
    if hub is None:
        log.warning("Agent '%s' has MCP servers but this run has no MCP hub", agent)
        return []

    async def discover() -> list[dict[str, Any]]:
        specs: list[McpToolSpec] = []
        for server in servers:
            specs.extend(await hub.list_tools(server))
        # a server's text may hold what no store can (a NUL): made storable, as a tool's result;
        # a name changed so is no valid tool name, and is skipped (mcp_function_tools)
        return list(storable([s.to_json() for s in specs]))

    recorded = await steps.step(step, discover)
    return [McpToolSpec.from_json(d) for d in recorded] if isinstance(recorded, list) else []


def _invoke(hub: McpHub, server: McpServer, tool: str, caller: Caller) -> Any:
    async def invoke(args: dict[str, Any]) -> str:
        return await hub.call_tool(server, tool, args, caller)

    return invoke


def mcp_function_tools(
    agent: str,
    specs: Sequence[McpToolSpec],
    servers: Sequence[McpServer],
    hub: McpHub,
    caller: Caller,
    taken: Iterable[str] = (),
) -> dict[str, FunctionTool]:
    """``mcp.<server>.<tool>`` → a function tool calling it as ``caller``. A tool whose name is
    invalid, or is on the wire (where ``.`` is ``__``) the name of a tool listed before it or of
    another one in ``taken`` (the agent's own), is skipped: a server's names must not fail the
    run. (An MCP tool named exactly like one of the agent's replaces it, spec §4.4.)"""
    by_name = {s.name: s for s in servers}
    tools: dict[str, FunctionTool] = {}
    wires = {wire_name(name): name for name in taken}
    for spec in specs:
        server = by_name.get(spec.server)
        if server is None:
            continue  # listed by an earlier definition of this agent
        wire = wire_name(spec.key)
        if not spec.usable() or spec.key in tools or wires.get(wire, spec.key) != spec.key:
            log.warning(
                "Agent '%s': skipping MCP tool %r (invalid or repeated name)", agent, spec.key
            )
            continue
        wires[wire] = spec.key
        tools[spec.key] = FunctionTool(
            name=spec.key,
            description=spec.description,
            parameters=spec.input_schema,
            fn=_invoke(hub, server, spec.name, caller),
            annotations=spec.annotations(),
        )
    return tools
