"""The agent loop: model turn → tool calls → results → next turn, checkpointed after each step.

A replacement attempt passes the saved :class:`LoopState` back in: finished tool calls are not run
again and a model turn already answered is not asked again (spec: DESIGN §6).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tether.agents.definitions import AgentDefinition
from tether.agents.dispatch import Budget, ToolDispatcher
from tether.agents.errors import LimitExceeded, ModelError, ToolError, redact
from tether.agents.registry import extensions, model_tools, system_prompt, tool_index
from tether.agents.types import (
    AgentEvent,
    AgentInput,
    Limits,
    Message,
    ModelAdapter,
    ToolCall,
    TurnOutcome,
    status,
    system,
    tool_call_event,
    tool_result_event,
    user,
)
from tether.jsonvalue import dumps

log = logging.getLogger(__name__)

STATE_VERSION = 1
Emit = Callable[[AgentEvent], Awaitable[Any]]
ModelFor = Callable[[AgentDefinition], ModelAdapter]


@dataclass
class LoopState:
    """Everything a replacement attempt needs to resume; saved as JSON after every step."""

    agent: str
    messages: list[Message]
    text: str = ""
    steps: int = 0
    tool_calls_used: int = 0
    pending: list[ToolCall] = field(default_factory=list)
    done_calls: list[str] = field(default_factory=list)
    finished: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "v": STATE_VERSION,
            "agent": self.agent,
            "text": self.text,
            "steps": self.steps,
            "toolCallsUsed": self.tool_calls_used,
            "finished": self.finished,
            "messages": [m.to_json() for m in self.messages],
            "pending": [c.to_json() for c in self.pending],
            "doneCalls": self.done_calls,
        }

    @classmethod
    def from_json(cls, data: Any) -> LoopState | None:
        """A saved state, or None when ``data`` is not one this version wrote."""
        if not isinstance(data, dict) or data.get("v") != STATE_VERSION:
            return None
        return cls(
            agent=str(data["agent"]),
            text=str(data["text"]),
            steps=int(data["steps"]),
            tool_calls_used=int(data["toolCallsUsed"]),
            finished=bool(data["finished"]),
            messages=[Message.from_json(m) for m in data["messages"]],
            pending=[ToolCall.from_json(c) for c in data["pending"]],
            done_calls=[str(c) for c in data["doneCalls"]],
        )


def accumulate(text: str, event: AgentEvent) -> str:
    """``message_delta`` appends, ``message`` replaces (spec §3.2)."""
    if event.get("type") == "message_delta":
        return text + str(event.get("content") or "")
    if event.get("type") == "message":
        return str(event.get("content") or "")
    return text


@dataclass
class RunContext:
    """What one run shares across its agent and sub-agents."""

    emit: Emit
    model_for: ModelFor
    limits: Limits = field(default_factory=Limits)
    budget: Budget = field(default_factory=lambda: Budget(Limits().max_tool_calls))
    signal: asyncio.Event | None = None
    with_base_prompt: bool = True
    thread_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def aborted(self) -> bool:
        return self.signal is not None and self.signal.is_set()


Checkpoint = Callable[[LoopState], Awaitable[None]]


class AgentLoop:
    """Runs one agent over a :class:`LoopState` until it answers without tool calls."""

    def __init__(
        self,
        agent: AgentDefinition,
        run: RunContext,
        *,
        depth: int = 0,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        self.agent = agent
        self.run_ctx = run
        self.depth = depth
        self.index = tool_index(agent)
        self.adapter = run.model_for(agent)
        self.dispatcher = ToolDispatcher(self.index, run.limits, run.budget, depth, self._child)
        self._checkpoint = checkpoint

    def start(self, messages: list[Message]) -> LoopState:
        prompt = system_prompt(self.agent, with_base=self.run_ctx.with_base_prompt)
        return LoopState(self.agent.name, [system(prompt), *messages])

    async def run(self, state: LoopState) -> LoopState:
        self.run_ctx.budget.used = max(self.run_ctx.budget.used, state.tool_calls_used)
        max_steps = self.agent.max_steps or self.run_ctx.limits.max_steps
        while not state.finished:
            if state.pending:
                await self._run_pending(state)
            if state.steps >= max_steps or self.run_ctx.aborted():
                break
            outcome = await self._turn(state)
            if outcome is None:
                break
            state.steps += 1
            state.messages.append(Message("assistant", outcome.text, tool_calls=outcome.tool_calls))
            state.pending, state.done_calls = list(outcome.tool_calls), []
            state.finished = not outcome.tool_calls
            await self._save(state)
        return state

    async def _save(self, state: LoopState) -> None:
        if self._checkpoint is not None:
            state.tool_calls_used = self.run_ctx.budget.used
            await self._checkpoint(state)

    async def _emit(self, event: AgentEvent) -> None:
        if self.depth > 0 and event.get("type") == "metadata":
            return  # a child's metadata would overwrite the parent's
        await self.run_ctx.emit(event)

    async def _turn(self, state: LoopState) -> TurnOutcome | None:
        consumes = self.adapter.consumes_input_tools
        request = AgentInput(
            list(state.messages),
            model_tools(self.index) if consumes else [],
            self.run_ctx.thread_id,
            extensions(self.index),
            self.run_ctx.signal,
        )
        outcome = None
        try:
            async with contextlib.aclosing(self.adapter.turn(request)) as items:
                async for item in items:
                    if isinstance(item, TurnOutcome):
                        outcome = item
                    elif item.get("type") != "status":
                        state.text = accumulate(state.text, item)
                        await self._emit(item)
                    if self.run_ctx.aborted():
                        return None  # stop consuming at once; the text so far stands
        except ModelError as exc:
            if self.depth == 0:
                await self._emit(status("error", str(exc)))
            raise
        return outcome

    async def _run_pending(self, state: LoopState) -> None:
        for call in state.pending:
            if call.id in state.done_calls:
                continue
            content = await self._execute(call)
            state.messages.append(Message("tool", content, tool_call_id=call.id))
            state.done_calls.append(call.id)
            await self._save(state)
        state.pending, state.done_calls = [], []

    async def _execute(self, call: ToolCall) -> str:
        """Run one call, emitting ``tool_call`` and ``tool_result``; returns the tool message."""
        await self._emit(tool_call_event(call))
        try:
            result = await self.dispatcher.execute(call)
        except LimitExceeded as exc:
            await self._emit(tool_result_event(call.id, None, str(exc)))
            raise
        except ToolError as exc:
            error = str(exc)
        except Exception as exc:  # a tool's own failure: generic text out, redacted detail logged
            log.warning("tool '%s' raised %s: %s", call.name, type(exc).__name__, redact(str(exc)))
            error = f"Tool '{call.name}' failed."
        else:
            await self._emit(tool_result_event(call.id, result))
            return result
        await self._emit(tool_result_event(call.id, None, error))
        return dumps({"error": error})

    async def _child(self, agent: AgentDefinition, text: str, depth: int) -> str:
        loop = AgentLoop(agent, self.run_ctx, depth=depth)
        final = await loop.run(loop.start([user(text)]))
        return final.text
