"""The agent app's side of ``/api/agents/*`` (``tether.agent_surface.AgentsSurface``): the
gateway builds invocation inputs, ``/info`` and the Responses stream through it, never importing
the runtime."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether import InputRejected
from tether.agents.errors import DefinitionError
from tether.agents.registry import AgentRegistry, tool_index
from tether.agents.translator import ResponsesTranslator
from tether.jsonvalue import dumps

if TYPE_CHECKING:
    from tether.agents.definitions import AgentDefinition

MAX_CHARS = 64_000
MAX_ITEMS = 100


def _gated_tools(registry: AgentRegistry, agent: AgentDefinition) -> list[str]:
    """Tools of ``agent`` and its sub-agents that would wait for an approval."""
    names: list[str] = []
    seen: set[int] = set()
    pending = [agent]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for key, entry in tool_index(current).items():
            if entry.kind == "function" and registry.approval.gates(entry.definition.annotations):
                names.append(key)
        pending += current.agents.values()
    return sorted(set(names))


class AgentsView:
    def __init__(self, registry: AgentRegistry, parse: Callable[[Any], object]) -> None:
        self._registry = registry
        self._parse = parse  # the handler's own parser: what is accepted is what runs

    def _agent(self, name: str | None) -> AgentDefinition:
        try:
            return self._registry.get(name)
        except DefinitionError as exc:
            raise InputRejected(str(exc)) from None

    def chat_input(self, message: str, agent: str | None, skill: str | None = None) -> Any:
        self._agent(agent)
        value: dict[str, Any] = {"messages": message}
        if agent is not None:
            value["agent"] = agent
        if skill is not None:
            value["skill"] = skill
        self._parse(value)
        return value

    def keeps_thread(self, value: Any) -> bool:
        """An agent this app no longer has (a turn stored before a redeploy) keeps its thread:
        nothing says it was ephemeral."""
        name = value.get("agent") if isinstance(value, Mapping) else None
        try:
            agent = self._registry.get(name if isinstance(name, str) else None)
        except DefinitionError:
            return True
        return not agent.ephemeral

    def responses_input(self, items: str | Sequence[Mapping[str, Any]]) -> Any:
        agent = self._agent(None)
        gated = _gated_tools(self._registry, agent)
        if gated:
            raise InputRejected(
                f"Agent '{agent.name}' exposes {len(gated)} approval-gated tool(s) "
                f"({', '.join(gated)}); /api/agents/invocations does not stream and cannot "
                "ask for approvals: use /api/agents/chat"
            )
        if isinstance(items, str):
            messages: Any = items
        else:
            messages = []
            for item in items:
                role = item.get("role") or "user"
                if role == "system":
                    raise InputRejected(
                        "input items with role 'system' are refused: the agent owns its prompt"
                    )
                content = item.get("content")
                text = (
                    content
                    if isinstance(content, str)
                    else ""
                    if content is None
                    else dumps(content)
                )
                if text:
                    messages.append({"role": role, "content": text})
            if not messages:
                raise InputRejected("input holds no message with content")
        value = {"messages": messages, "approvals": "deny"}  # gated MCP tools: denied, not awaited
        self._parse(value)
        return value

    def info(self) -> dict[str, Any]:
        try:
            default: str | None = self._registry.default_name()
        except DefinitionError:
            default = None
        return {
            "agents": sorted(self._registry.agents),
            "defaultAgent": default,
            "skills": self._registry.skills_info(),
        }

    def translator(self, stream_id: str | None) -> ResponsesTranslator:
        return ResponsesTranslator(stream_id)
