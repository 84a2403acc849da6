"""The agents a server runs: lookup by name, the default agent, models, prompts and tool index."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from tether.agents.adapters.hosted import HostedTool
from tether.agents.approvals import ApprovalPolicy
from tether.agents.definitions import AgentDefinition, Tool
from tether.agents.errors import DefinitionError
from tether.agents.models import resolve_model
from tether.agents.tools import FunctionTool
from tether.agents.types import SUPERVISOR_NAMESPACE, Limits, ModelAdapter, ToolDefinition

log = logging.getLogger(__name__)

SUB_AGENT_PREFIX = "agent-"
BASE_SYSTEM_PROMPT = (
    "You are {name}, an AI agent. Answer the user's request. When a tool can give you facts you "
    "do not have, call it; never invent tool results."
)


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """One callable name in an agent's tool index."""

    kind: Literal["function", "subagent", "hosted"]
    definition: ToolDefinition
    tool: FunctionTool | None = None
    agent: AgentDefinition | None = None
    hosted: HostedTool | None = None


def sub_agent_tool(key: str, child: AgentDefinition) -> ToolDefinition:
    text = child.description or child.instructions[:120] or f"Delegate to the {key} sub-agent"
    return ToolDefinition(
        SUB_AGENT_PREFIX + key,
        text,
        {
            "type": "object",
            "properties": {
                "input": {"type": "string", "description": "Message to send to the sub-agent."}
            },
            "required": ["input"],
        },
    )


def _tool_entry(key: str, value: Tool) -> ToolEntry:
    if isinstance(value, HostedTool):
        placeholder = ToolDefinition(key, value.description, {"type": "object", "properties": {}})
        return ToolEntry("hosted", placeholder, hosted=value)
    return ToolEntry("function", value.definition(key), tool=value)


def tool_index(agent: AgentDefinition) -> dict[str, ToolEntry]:
    """Sub-agents first, then explicit tools (a later entry overwrites the same key)."""
    index = {
        SUB_AGENT_PREFIX + k: ToolEntry("subagent", sub_agent_tool(k, c), agent=c)
        for k, c in agent.agents.items()
    }
    index.update({k: _tool_entry(k, v) for k, v in agent.tools.items()})
    return index


def model_tools(index: Mapping[str, ToolEntry]) -> list[ToolDefinition]:
    """What the adapter receives as ``tools``: hosted placeholders are filtered out."""
    return [e.definition for e in index.values() if e.kind != "hosted"]


def extensions(index: Mapping[str, ToolEntry]) -> dict[str, object] | None:
    specs = [e.hosted.spec for e in index.values() if e.hosted is not None]
    return {SUPERVISOR_NAMESPACE: {"hostedTools": specs}} if specs else None


def capability_warnings(agent: AgentDefinition, adapter: ModelAdapter) -> list[str]:
    """Mismatches between an agent's tools and its model, logged and never raised."""
    index = tool_index(agent)
    hosted = [k for k, e in index.items() if e.kind == "hosted"]
    local = [k for k, e in index.items() if e.kind != "hosted"]
    warnings = []
    if hosted and SUPERVISOR_NAMESPACE not in adapter.accepts_extensions:
        warnings.append(
            f"Agent '{agent.name}': hosted Supervisor tools {hosted} are ignored by "
            f"{adapter.name}, which does not accept '{SUPERVISOR_NAMESPACE}'"
        )
    if local and not adapter.consumes_input_tools:
        warnings.append(
            f"Agent '{agent.name}': tools {local} are ignored by {adapter.name}, "
            "which runs its tools upstream"
        )
    return warnings


def system_prompt(agent: AgentDefinition, *, with_base: bool = True) -> str:
    """The composed system prompt: base prompt (unless disabled) then the instructions."""
    base = agent.base_system_prompt
    if not with_base or base is False:
        base_text = ""
    elif isinstance(base, str):
        base_text = base
    else:
        base_text = BASE_SYSTEM_PROMPT.format(name=agent.name)
    return "\n\n".join(p for p in (base_text.strip(), agent.instructions.strip()) if p)


class AgentSettingsLike(Protocol):
    """``settings.agents`` as the composition root hands it over (``tether.settings``)."""

    max_tool_calls: int
    max_sub_agent_depth: int
    tool_call_timeout: float
    max_steps: int
    max_result_chars: int
    max_tool_argument_bytes: int
    default_model: str | None


@dataclass
class AgentRegistry:
    """Named agents plus the defaults the built-in handler needs."""

    agents: dict[str, AgentDefinition] = field(default_factory=dict)
    default_agent: str | None = None
    default_model: ModelAdapter | str | None = None
    limits: Limits = field(default_factory=Limits)
    approval: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    explicit_limits: bool = False
    """Limits were given in code: the server's settings do not replace them."""
    _models: dict[int, ModelAdapter] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, agents: Iterable[AgentDefinition], **options: object) -> AgentRegistry:
        options.setdefault("explicit_limits", "limits" in options)
        return cls({a.name: a for a in agents}, **options)  # type: ignore[arg-type]

    def apply_settings(self, settings: AgentSettingsLike) -> None:
        """The server's ``agents`` settings: limits (unless given in code) and the default
        model (unless given in code)."""
        if not self.explicit_limits:
            self.limits = replace(
                self.limits,
                max_tool_calls=settings.max_tool_calls,
                max_sub_agent_depth=settings.max_sub_agent_depth,
                tool_call_timeout_s=settings.tool_call_timeout,
                max_steps=settings.max_steps,
                max_result_chars=settings.max_result_chars,
                max_tool_argument_bytes=settings.max_tool_argument_bytes,
            )
        if self.default_model is None and settings.default_model:
            self.default_model = settings.default_model
            self._models.clear()

    def preflight(self) -> list[str]:
        """Resolve every agent's model now, so a missing model or unusable Databricks
        credentials, and tools a model would ignore, are reported when the server starts
        rather than on a user's first request. Never raises."""
        problems: list[str] = []
        for agent in self.agents.values():
            try:
                self.model_for(agent, warn=False)
            except DefinitionError as exc:
                problems.append(str(exc))
                continue
            except Exception as exc:  # the credential chain: its text may name a secret source
                problems.append(
                    f"Agent '{agent.name}': its model cannot be used ({type(exc).__name__}); "
                    "check DATABRICKS_HOST and the Databricks credentials"
                )
                continue
            problems += capability_warnings(agent, self._models[id(agent)])
        return problems

    def default_name(self) -> str:
        """Configured default, else a code agent with default, else a Markdown one, else first."""
        if not self.agents:
            raise DefinitionError("No agent registered")
        if self.default_agent is not None:
            if self.default_agent not in self.agents:
                raise DefinitionError(
                    f"defaultAgent '{self.default_agent}' is not registered. "
                    f"Available: {', '.join(sorted(self.agents))}"
                )
            return self.default_agent
        for origin in ("code", "markdown"):
            flagged = sorted(n for n, a in self.agents.items() if a.default and a.origin == origin)
            if flagged:
                return flagged[0]
        return next(iter(self.agents))

    def get(self, name: str | None) -> AgentDefinition:
        key = name or self.default_name()
        if key not in self.agents:
            raise DefinitionError(
                f'Agent "{key}" not found. Available: {", ".join(sorted(self.agents)) or "<none>"}'
            )
        return self.agents[key]

    def model_for(self, agent: AgentDefinition, *, warn: bool = True) -> ModelAdapter:
        """The agent's adapter, built once per agent; capability warnings are logged then."""
        cached = self._models.get(id(agent))
        if cached is not None:
            return cached
        adapter = resolve_model(agent, self.default_model)
        for warning in capability_warnings(agent, adapter) if warn else ():
            log.warning("%s", warning)
        self._models[id(agent)] = adapter
        return adapter
