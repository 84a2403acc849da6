"""Agent definitions: the code form (``create_agent``) shared with Markdown agents."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tether import ModelPrice
from tether.agents.adapters.hosted import HostedTool, is_supervisor_tool
from tether.agents.adapters.scripted import ScriptedTurn
from tether.agents.approvals import checked_timeout
from tether.agents.errors import DefinitionError
from tether.agents.mcp.servers import McpServer, unique_servers
from tether.agents.tools import FunctionTool
from tether.agents.types import ModelAdapter

if TYPE_CHECKING:
    from tether.agents.skills.catalog import SkillCatalog  # skills read front matter: no cycle

AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
Tool = FunctionTool | HostedTool
Origin = Literal["code", "markdown"]
ON_BEHALF_OF_USER = "on-behalf-of-user"


@dataclass(eq=False)
class AgentDefinition:
    """One agent. Sub-agents become ``agent-<key>`` tools; tools are keyed by their model name.

    ``model`` is an adapter object or a model string (see ``shared.agents.models.resolve_model``);
    None uses the registry's default model. ``base_system_prompt`` False disables the base prompt,
    a string replaces it, None keeps the built-in one. ``approval_timeout_s`` is how long this
    agent's gated tools wait for a decision (None: the registry's ``ApprovalPolicy.timeout_s``).
    ``skill_refs`` names the shared skills the agent opts into (None: none declared);
    ``skills`` is its resolved catalog, set when a registry loads it (None: it sees no skill).
    ``mcp_servers`` are the MCP servers whose tools it gets (``mcp.<server>.<tool>``).
    """

    name: str
    instructions: str = ""
    model: ModelAdapter | str | None = None
    tools: dict[str, Tool] = field(default_factory=dict)
    agents: dict[str, AgentDefinition] = field(default_factory=dict)
    default: bool = False
    description: str | None = None
    max_steps: int | None = None
    max_tokens: int | None = None
    generation_params: dict[str, Any] = field(default_factory=dict)
    base_system_prompt: str | Literal[False] | None = None
    ephemeral: bool = False
    auth: str | None = None
    """``on-behalf-of-user``: model calls and tools run on the caller's credentials."""
    resume_without_user: bool = False
    """An on-behalf-of-user run that lost the caller's token (a replacement after a crash)
    goes on with the app's credentials instead of failing ``user_auth_recovery_unsupported``."""
    script: tuple[ScriptedTurn, ...] = ()
    approval_timeout_s: float | None = None
    skill_refs: tuple[str, ...] | None = None
    skills: SkillCatalog | None = None
    mcp_servers: tuple[McpServer, ...] = ()
    price: ModelPrice | None = None
    """Its model's price per million input and output tokens, for the cost of its calls
    (None: cost 0, unknown)."""
    origin: Origin = "code"
    source: Path | None = None

    @property
    def where(self) -> str:
        return str(self.source) if self.source is not None else f"code agent '{self.name}'"


def _tool_key(value: Any) -> str:
    if isinstance(value, FunctionTool):
        return value.name
    if isinstance(value, HostedTool):
        return value.key
    raise DefinitionError(f"tool {value!r} has an unrecognized shape")


def normalize_tools(tools: Mapping[str, Any] | Sequence[Any] | None) -> dict[str, Tool]:
    """Tools keyed by the name the model sees; a mapping chooses the keys itself."""
    items = (
        tools.items() if isinstance(tools, Mapping) else ((_tool_key(t), t) for t in tools or ())
    )
    out: dict[str, Tool] = {}
    for key, value in items:
        if isinstance(value, dict) and is_supervisor_tool(value):
            value = HostedTool(dict(value["spec"]))
        if not isinstance(value, FunctionTool | HostedTool):
            raise DefinitionError(f"tool '{key}' has an unrecognized shape")
        out[key] = value
    return out


def check_no_cycles(root: AgentDefinition) -> None:
    """Reject an agent that reaches itself through its sub-agents (code agents only)."""

    def visit(agent: AgentDefinition, path: tuple[str, ...]) -> None:
        for child in agent.agents.values():
            if child.name in path or child is root:
                cycle = " -> ".join((*path, child.name))
                raise DefinitionError(f"Agent '{root.name}': sub-agent cycle {cycle}")
            visit(child, (*path, child.name))

    visit(root, (root.name,))


def checked_price(value: Any, where: str) -> ModelPrice | None:
    """A model price from ``{input, output}`` (per million tokens; either may be left out)."""
    if value is None or isinstance(value, ModelPrice):
        return value
    if not isinstance(value, Mapping) or set(value) - {"input", "output"}:
        raise DefinitionError(
            f"{where}: 'price' must be {{input, output}}, each a price per million tokens"
        )
    try:
        return ModelPrice(value.get("input", 0.0), value.get("output", 0.0))
    except ValueError as exc:
        raise DefinitionError(f"{where}: 'price': {exc}") from None


def _skill_refs(name: str, skills: Sequence[str] | None) -> tuple[str, ...] | None:
    if skills is None:
        return None
    if isinstance(skills, str) or not all(isinstance(s, str) and s.strip() for s in skills):
        raise DefinitionError(f"Agent '{name}': skills must be a list of skill names")
    return tuple(dict.fromkeys(s.strip() for s in skills))


def _servers(name: str, servers: Sequence[McpServer]) -> tuple[McpServer, ...]:
    if not all(isinstance(s, McpServer) for s in servers):
        raise DefinitionError(f"Agent '{name}': mcp_servers must come from mcp_server(...)")
    return unique_servers(servers, f"Agent '{name}'")


def create_agent(
    name: str,
    instructions: str = "",
    *,
    model: ModelAdapter | str | None = None,
    tools: Mapping[str, Any] | Sequence[Any] | None = None,
    agents: Mapping[str, AgentDefinition] | Sequence[AgentDefinition] | None = None,
    default: bool = False,
    description: str | None = None,
    max_steps: int | None = None,
    max_tokens: int | None = None,
    generation_params: Mapping[str, Any] | None = None,
    base_system_prompt: str | Literal[False] | None = None,
    script: Sequence[Any] = (),
    approval_timeout_s: float | None = None,
    auth: str | None = None,
    resume_without_user: bool = False,
    ephemeral: bool = False,
    skills: Sequence[str] | None = None,
    mcp_servers: Sequence[McpServer] = (),
    price: ModelPrice | Mapping[str, float] | None = None,
) -> AgentDefinition:
    """A validated code agent. Sub-agent cycles are rejected here. ``skills`` names shared
    skills to opt into (resolved when a registry loads the agent); ``mcp_servers`` come from
    ``mcp_server(name, url, ...)``; ``price`` is the model's ``{input, output}`` price per
    million tokens (for the cost of its calls)."""
    if not isinstance(name, str) or not AGENT_NAME.match(name):
        raise DefinitionError(f"agent name {name!r} must match {AGENT_NAME.pattern}")
    if not isinstance(instructions, str):
        raise DefinitionError(f"Agent '{name}': instructions must be a string")
    if auth is not None and auth != ON_BEHALF_OF_USER:
        raise DefinitionError(f"Agent '{name}': auth must be '{ON_BEHALF_OF_USER}'")
    children = dict(agents) if isinstance(agents, Mapping) else {a.name: a for a in agents or ()}
    for key, child in children.items():
        if not isinstance(child, AgentDefinition):
            raise DefinitionError(f"Agent '{name}': sub-agent '{key}' is not an AgentDefinition")
    for label, value in (("max_steps", max_steps), ("max_tokens", max_tokens)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise DefinitionError(f"Agent '{name}': {label} must be a positive integer")
    agent = AgentDefinition(
        name=name,
        instructions=instructions.strip(),
        model=model,
        tools=normalize_tools(tools),
        agents=children,
        default=default is True,
        description=description,
        max_steps=max_steps,
        max_tokens=max_tokens,
        generation_params=dict(generation_params or {}),
        base_system_prompt=base_system_prompt,
        script=tuple(ScriptedTurn.parse(t) for t in script),
        approval_timeout_s=checked_timeout(approval_timeout_s, f"Agent '{name}'"),
        auth=auth,
        resume_without_user=resume_without_user is True,
        ephemeral=ephemeral is True,
        skill_refs=_skill_refs(name, skills),
        mcp_servers=_servers(name, mcp_servers),
        price=checked_price(price, f"Agent '{name}'"),
    )
    check_no_cycles(agent)
    return agent


def reachable(agents: Iterable[AgentDefinition]) -> list[AgentDefinition]:
    """``agents`` and every sub-agent they reach, each once, in the order first met."""
    seen: dict[int, AgentDefinition] = {}
    pending = list(agents)
    while pending:
        agent = pending.pop(0)
        if id(agent) not in seen:
            seen[id(agent)] = agent
            pending.extend(agent.agents.values())
    return list(seen.values())
