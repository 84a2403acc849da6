"""One tool call of an agent loop, from ``tool_call`` to its recorded outcome.

Every call ends in one durable step named by its place in the run (``<agent>#t<turn>.c<i>``)
whose value is the outcome the model reads: the tool's result, a tool error, a denial, or a
sub-agent's answer. The step emits ``tool_result`` when it first runs, so a replay neither runs
the tool nor repeats the event. A gated call waits for its approval before that step; a
sub-agent runs its own steps before it. Nothing durable is nested inside a step.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tether.agents.approvals import ApprovalGate, ApprovalRequest, approval_id, denial_text
from tether.agents.definitions import ON_BEHALF_OF_USER, AgentDefinition
from tether.agents.dispatch import ToolDispatcher, ToolRaisedBase, sub_agent_input
from tether.agents.errors import LimitExceeded, ModelError, ToolError
from tether.agents.registry import SUB_AGENT_PREFIX, ToolEntry
from tether.agents.run_context import Emit, RunContext
from tether.agents.steps import AgentPath
from tether.agents.tool_context import ToolContext
from tether.agents.types import ToolCall, tool_call_event, tool_result_event
from tether.jsonvalue import dumps, json_bytes, storable

log = logging.getLogger(__name__)

RunChild = Callable[[AgentDefinition, str, AgentPath], Awaitable[str]]
"""Runs a sub-agent on an input at a place in the run and returns its text."""


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a call produced: a result text, or an error text the model may read."""

    result: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"result": self.result} if self.error is None else {"error": self.error}

    @classmethod
    def from_json(cls, data: Any) -> ToolOutcome:
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return cls(error=data["error"])
        return cls(result=str(data.get("result") or "") if isinstance(data, dict) else "")

    def message(self) -> str:
        """The tool message's content."""
        return (self.result or "") if self.error is None else dumps({"error": self.error})


def _given(outcome: ToolOutcome) -> Callable[[], Awaitable[ToolOutcome]]:
    async def produce() -> ToolOutcome:
        return outcome

    return produce


@dataclass
class ToolCalls:
    """Runs the calls of one agent loop (at ``path``) in order."""

    agent: AgentDefinition
    run: RunContext
    path: AgentPath
    dispatcher: ToolDispatcher
    emit: Emit
    run_child: RunChild
    gate: ApprovalGate = field(init=False)

    def __post_init__(self) -> None:
        self.gate = ApprovalGate(self.run.steps, self.run.emit, self.run.approval)

    async def call(self, model_call: ToolCall, turn: int, position: int) -> str:
        """Run one call (or replay it) and return the tool message's content."""
        name = self.path.call(turn, position)
        call = replace(model_call, id=self.path.call_id(model_call.id))  # as events name it
        oversize = self._oversize(call)
        shown = call if oversize is None else replace(call, args={"omitted": oversize})
        await self.emit(tool_call_event(shown))
        try:
            entry = self.dispatcher.admit(call)
            if oversize is not None:
                raise ToolError(f"Tool '{call.name}' arguments are too large: {oversize}")
        except LimitExceeded as exc:
            await self.emit(tool_result_event(call.id, None, str(exc)))
            raise
        except ToolError as exc:
            return await self._settle(name, call, _given(ToolOutcome(error=str(exc))))
        if self.gate.policy.gates(entry.definition.annotations):
            decision = await self.gate.decide(self._request(call, entry, name))
            if not decision.approved:
                return await self._settle(name, call, _given(ToolOutcome(denial_text(call.name))))
        if entry.agent is not None:
            place = self.path.child(turn, position, entry.agent.name)
            outcome = await self._sub_agent(call, entry.agent, place)
            return await self._settle(name, call, _given(outcome))

        async def function() -> ToolOutcome:
            return await self._function(call, entry)

        return await self._settle(name, call, function)

    def _oversize(self, call: ToolCall) -> str | None:
        """Why the call's arguments cannot be run or shown: too large for the agents' cap, or
        for the server's event cap once in their ``tool_call`` event (measured as a sub-agent's
        forwarded event, which names its agent), or not storable."""
        limit = self.run.limits.max_tool_argument_bytes
        try:
            size = json_bytes(call.args)
        except ValueError:
            return "they hold characters that cannot be stored"
        if size > limit:
            return f"{size} bytes (limit {limit})"
        cap = self.run.max_event_bytes
        if cap is None:
            return None
        # the event around them, measured once with ``null`` (4 bytes) in their place
        envelope = {**tool_call_event(replace(call, args=None)), "agent": self.agent.name}
        event_size = size + json_bytes(envelope) - len("null")
        if event_size > cap:
            return f"{size} bytes (their event would be {event_size}; events hold at most {cap})"
        return None

    def _request(self, call: ToolCall, entry: ToolEntry, name: str) -> ApprovalRequest:
        return ApprovalRequest(
            approval_id=approval_id(self.run.thread_id, name),
            call_id=call.id,
            tool_name=call.name,
            args=call.args,
            annotations=entry.definition.annotations,
            agent_path=self.path.agents,
            timeout_s=self.agent.approval_timeout_s or self.run.approval.timeout_s,
        )

    async def _settle(
        self, name: str, call: ToolCall, produce: Callable[[], Awaitable[ToolOutcome]]
    ) -> str:
        async def settle() -> dict[str, Any]:
            # an error's text may be the outside's (an MCP server's) and hold a NUL: made
            # storable, as a result is (normalize_result), so the model reads it
            outcome = await produce()
            outcome = replace(outcome, error=storable(outcome.error))
            await self.emit(tool_result_event(call.id, outcome.result, outcome.error))
            return outcome.to_json()

        return ToolOutcome.from_json(await self.run.steps.step(name, settle)).message()

    def _context(self, call: ToolCall) -> ToolContext:
        run, as_user = self.run, self.agent.auth == ON_BEHALF_OF_USER
        return ToolContext(
            call_id=call.id,
            invocation_id=run.thread_id,
            attempt=run.attempt,
            step_key=run.step_key,
            agent=self.agent.name,
            request_auth=run.request_auth if as_user else None,
            on_behalf_of_user=as_user,
        )

    async def _function(self, call: ToolCall, entry: ToolEntry) -> ToolOutcome:
        try:
            return ToolOutcome(await self.dispatcher.run_function(call, entry, self._context(call)))
        except ToolError as exc:
            return ToolOutcome(error=str(exc))
        except Exception as exc:  # the tool's own failure: a fixed text out, its type logged
            raised = str(exc) if isinstance(exc, ToolRaisedBase) else type(exc).__name__
            log.warning("tool '%s' (call %s) raised %s", call.name, call.id, raised)
            return ToolOutcome(error=f"Tool '{call.name}' failed.")

    async def _sub_agent(
        self, call: ToolCall, agent: AgentDefinition, place: AgentPath
    ) -> ToolOutcome:
        try:
            text = await self.run_child(agent, sub_agent_input(call.args), place)
        except ModelError as exc:
            key = call.name.removeprefix(SUB_AGENT_PREFIX)
            return ToolOutcome(error=f"Sub-agent '{key}' failed: {exc}")
        return ToolOutcome(self.dispatcher.normalize(text))
