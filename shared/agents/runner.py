"""``run_agent``: one agent run with no server, no record and no thread store (spec §7)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tether.agents.approvals import ApprovalPolicy
from tether.agents.definitions import AgentDefinition, reachable
from tether.agents.dispatch import Budget
from tether.agents.errors import DefinitionError
from tether.agents.loop import AgentLoop
from tether.agents.metering import UsageTally
from tether.agents.models import resolve_model
from tether.agents.registry import capability_warnings
from tether.agents.run_context import RunContext
from tether.agents.steps import Unrecorded
from tether.agents.types import AgentEvent, Limits, Message, ModelAdapter, user
from tether.usage import UsageTotals

log = logging.getLogger(__name__)


@dataclass
class AgentRunResult:
    text: str
    events: list[AgentEvent] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    usage: UsageTotals = field(default_factory=UsageTotals)
    """What the run's model calls used (estimated where a model reported none)."""


def _messages(value: str | Sequence[Message | dict[str, Any]]) -> list[Message]:
    if isinstance(value, str):
        return [user(value)]
    return [m if isinstance(m, Message) else Message.from_json(m) for m in value]


async def run_agent(
    definition: AgentDefinition,
    input: str | Sequence[Message | dict[str, Any]],  # noqa: A002 - the spec's name
    *,
    model: ModelAdapter | str | None = None,
    limits: Limits | None = None,
    signal: asyncio.Event | None = None,
    on_event: Callable[[AgentEvent], Awaitable[None]] | None = None,
) -> AgentRunResult:
    """Run ``definition`` on ``input``: ``[system(instructions), *messages]``, no base prompt.

    The tool-call budget and sub-agent depth limits apply, as in the server; there is no approval
    gate (as in the reference: nobody is there to decide), so ``write`` and ``destructive`` tools
    run. Nothing is recorded: a run that dies is not resumed. Setting ``signal``
    stops the run and returns the text so far. Model errors raise ``ModelError``. ``on_event`` sees
    each event as it happens (the result also lists them all). MCP servers need the server
    (spec §7): an agent that uses one raises ``DefinitionError`` before any model call; skills
    are offered as tools, without the prompt catalog (no prompt is composed here).
    """
    for agent in reachable([definition]):
        if agent.mcp_servers:
            raise DefinitionError(
                f"run_agent: agent '{agent.name}' uses MCP servers, which are only supported "
                "in the server (build_agent_app)"
            )
    events: list[AgentEvent] = []
    models: dict[int, ModelAdapter] = {}

    def model_for(agent: AgentDefinition) -> ModelAdapter:
        if id(agent) not in models:
            override = model if agent is definition else None
            if override is not None and not isinstance(override, str):
                adapter = override
            else:
                chosen = agent if override is None else replace(agent, model=override)
                adapter = resolve_model(chosen, None)
            for warning in capability_warnings(agent, adapter):
                log.warning("%s", warning)
            models[id(agent)] = adapter
        return models[id(agent)]

    async def emit(event: AgentEvent) -> None:
        events.append(event)
        if on_event is not None:
            await on_event(event)

    limits = limits or Limits()
    tally = UsageTally()
    run = RunContext(
        emit=emit,
        model_for=model_for,
        limits=limits,
        budget=Budget(limits.max_tool_calls),
        signal=signal,
        with_base_prompt=False,
        steps=Unrecorded(),
        approval=ApprovalPolicy(require_for_destructive=False),
        meter=tally,
    )
    loop = AgentLoop(definition, run)
    state = await loop.run(loop.start(_messages(input)))
    return AgentRunResult(state.text, events, state.messages, tally.totals)
