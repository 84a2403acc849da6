"""The agent loop: model turn → tool calls → results → next turn, each a durable step.

A model turn is a step named ``<agent>#t<turn>`` whose value is what the turn produced (the run
text after it and the reply, or the model's error); a tool call ends in a step of its own
(``shared.agents.calls``). A resumed or replacement attempt runs the loop from the top and gets
every recorded turn and call back without asking the model or running the tool again, sub-agents
included, so the messages, the text and the tool budget come out exactly as the first attempt
built them (DESIGN §3, durable execution).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from typing import Any

from tether.agents.calls import ToolCalls
from tether.agents.definitions import ON_BEHALF_OF_USER, AgentDefinition
from tether.agents.dispatch import ToolDispatcher
from tether.agents.errors import ModelError
from tether.agents.mcp.agent_tools import mcp_function_tools, recorded_mcp_tools
from tether.agents.mcp.credentials import Caller
from tether.agents.metering import turn_usage
from tether.agents.registry import ToolEntry, extensions, model_tools, system_prompt, tool_index
from tether.agents.run_context import RunContext
from tether.agents.skills.prompt import recorded_skills_prompt
from tether.agents.steps import AgentPath
from tether.agents.types import (
    AgentEvent,
    AgentInput,
    Message,
    ToolCall,
    TurnOutcome,
    status,
    system,
    user,
)
from tether.jsonvalue import storable


@dataclass
class LoopState:
    """One agent's conversation so far, rebuilt by replay on every attempt. ``skill`` is a
    skill the user forced for this run (``/skill-name``); ``prepared`` says whether the run's
    skills prompt and MCP tools are in place (:meth:`AgentLoop.run` does it first)."""

    agent: str
    messages: list[Message]
    text: str = ""
    steps: int = 0
    finished: bool = False
    skill: str | None = None
    prepared: bool = False


def accumulate(text: str, event: AgentEvent) -> str:
    """``message_delta`` appends, ``message`` replaces (spec §3.2)."""
    if event.get("type") == "message_delta":
        return text + str(event.get("content") or "")
    if event.get("type") == "message":
        return str(event.get("content") or "")
    return text


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """A model turn as recorded: the run's text after it and the reply (None when the turn was
    aborted or ended without one), or the model's error."""

    text: str
    reply: TurnOutcome | None = None
    error: ModelError | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            e = self.error
            return {"error": {"adapter": e.adapter, "code": e.code, "status": e.status}}
        reply = self.reply
        return {
            "text": self.text,
            "reply": None
            if reply is None
            else {"text": reply.text, "toolCalls": [c.to_json() for c in reply.tool_calls]},
        }

    @classmethod
    def from_json(cls, data: Any) -> TurnRecord:
        if data.get("error") is not None:
            e = data["error"]
            return cls("", error=ModelError(str(e["adapter"]), str(e["code"]), status=e["status"]))
        reply = data.get("reply")
        if reply is None:
            return cls(str(data["text"]))
        calls = tuple(ToolCall.from_json(c) for c in reply["toolCalls"])
        return cls(str(data["text"]), TurnOutcome(str(reply["text"]), calls))


class AgentLoop:
    """Runs one agent over a :class:`LoopState` until it answers without tool calls."""

    def __init__(
        self, agent: AgentDefinition, run: RunContext, *, path: AgentPath | None = None
    ) -> None:
        self.agent = agent
        self.run_ctx = run
        self.path = path or AgentPath.root(agent.name)
        self.adapter = run.model_for(agent)
        self._wire(tool_index(agent))

    def _wire(self, index: dict[str, ToolEntry]) -> None:
        run = self.run_ctx
        self.index = index
        dispatcher = ToolDispatcher(index, run.limits, run.budget, self.path.depth)
        self.calls = ToolCalls(self.agent, run, self.path, dispatcher, self._emit, self._child)

    def start(self, messages: list[Message], *, skill: str | None = None) -> LoopState:
        prompt = system_prompt(self.agent, with_base=self.run_ctx.with_base_prompt)
        return LoopState(self.agent.name, [system(prompt), *messages], skill=skill)

    async def _prepare(self, state: LoopState) -> None:
        """The run's skills prompt and MCP tools, each a durable step of this loop (when the
        agent has any), so that every attempt shows the model what the first one did. The
        standalone runner composes no prompt (spec §7), so it lists no skill catalog."""
        run, agent = self.run_ctx, self.agent
        if run.with_base_prompt:
            extra = await recorded_skills_prompt(
                agent.name, agent.skills, state.skill, run.steps, self.path.named("prompt")
            )
            if extra:
                head = state.messages[0] if state.messages else None
                if head is not None and head.role == "system":
                    text = "\n\n".join(p for p in (head.content, extra) if p)
                    state.messages[0] = system(text)
                else:
                    state.messages.insert(0, system(extra))
        specs = await recorded_mcp_tools(
            agent.name, agent.mcp_servers, run.mcp, run.steps, self.path.named("mcp")
        )
        if specs and run.mcp is not None:
            strict = agent.auth == ON_BEHALF_OF_USER and not agent.resume_without_user
            caller = Caller(run.mcp_auth, on_behalf_of_user=strict)
            tools = mcp_function_tools(
                agent.name, specs, agent.mcp_servers, run.mcp, caller, taken=self.index
            )
            self._wire(tool_index(agent, tools))
        state.prepared = True

    async def run(self, state: LoopState) -> LoopState:
        if not state.prepared:
            await self._prepare(state)
        max_steps = self.agent.max_steps or self.run_ctx.limits.max_steps
        while not state.finished and state.steps < max_steps and not self.run_ctx.aborted():
            turn = state.steps
            record = await self._turn(state, turn)
            state.text = record.text
            if record.reply is None:
                break
            state.steps += 1
            reply = record.reply
            state.messages.append(Message("assistant", reply.text, tool_calls=reply.tool_calls))
            for position, call in enumerate(reply.tool_calls):
                content = await self.calls.call(call, turn, position)
                state.messages.append(Message("tool", content, tool_call_id=call.id))
            state.finished = not reply.tool_calls
        return state

    async def _emit(self, event: AgentEvent) -> None:
        if self.path.depth > 0:
            if event.get("type") == "metadata":
                return  # a child's metadata would overwrite the parent's
            event = {**event, "agent": self.agent.name}  # forwarded: say whose it is
        await self.run_ctx.emit(event)

    async def _turn(self, state: LoopState, turn: int) -> TurnRecord:
        """The turn's record: asked of the model once, replayed on every later attempt."""
        consumes = self.adapter.consumes_input_tools
        request = AgentInput(
            list(state.messages),
            model_tools(self.index) if consumes else [],
            self.run_ctx.thread_id,
            extensions(self.index),
            self.run_ctx.signal,
            self.run_ctx.model_headers if self.agent.auth == ON_BEHALF_OF_USER else None,
        )

        async def ask() -> dict[str, Any]:
            return (await self._ask(request, state.text)).to_json()

        name = self.path.turn(turn)
        await self.run_ctx.meter.admit_model_call(name)  # budgets; nothing when replayed
        record = TurnRecord.from_json(await self.run_ctx.steps.step(name, ask))
        if record.error is not None:
            if self.path.depth == 0:
                await self._emit(status("error", str(record.error)))
            raise record.error
        return record

    async def _ask(self, request: AgentInput, text: str) -> TurnRecord:
        """Stream one turn, emitting its events, then add its usage; a model failure is
        recorded, not raised, so a replay fails (or, in a sub-agent, reports it) exactly as the
        first attempt did."""
        outcome, before, aborted = None, text, False
        try:
            async with contextlib.aclosing(self.adapter.turn(request)) as items:
                async for item in items:
                    if isinstance(item, TurnOutcome):
                        outcome = storable_outcome(item)
                    elif item.get("type") != "status":
                        item = storable(item)  # a model may send a NUL: stored as U+FFFD
                        text = accumulate(text, item)
                        await self._emit(item)
                    if self.run_ctx.aborted():
                        aborted = True  # stop consuming at once; the text so far stands
                        break
        except ModelError as exc:
            return TurnRecord(text, error=exc)
        streamed = text[len(before) :] if text.startswith(before) else text
        usage = turn_usage(request, None if aborted else outcome, streamed, self.agent.price)
        await self.run_ctx.meter.record_model_usage(usage)
        return TurnRecord(text) if aborted else TurnRecord(text, outcome)

    async def _child(self, agent: AgentDefinition, text: str, path: AgentPath) -> str:
        loop = AgentLoop(agent, self.run_ctx, path=path)
        final = await loop.run(loop.start([user(text)]))
        return final.text


def storable_outcome(outcome: TurnOutcome) -> TurnOutcome:
    """The outcome with what no store can hold (NUL, lone surrogates) in its text and its tool
    calls replaced by U+FFFD: the turn is recorded and the run goes on."""
    calls = tuple(
        replace(c, id=storable(c.id), name=storable(c.name), args=storable(c.args))
        for c in outcome.tool_calls
    )
    return replace(outcome, text=storable(outcome.text), tool_calls=calls)
