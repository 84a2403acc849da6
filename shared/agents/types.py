"""The agent runtime's vocabulary: messages, tool calls, tool definitions, events and limits.

Events are plain JSON objects (``dict``) because they go straight to ``ctx.emit``; the helpers
below build each kind so its keys are spelled in one place (spec §3.1).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tether import ModelUsage

Role = Literal["system", "user", "assistant", "tool"]
ToolEffect = Literal["read", "write", "update", "destructive"]
AgentEvent = dict[str, Any]
JsonSchema = dict[str, Any]

SUPERVISOR_NAMESPACE = "databricks.supervisor"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for; ``args`` is the parsed JSON object (or raw text if invalid)."""

    id: str
    name: str
    args: Any
    thought_signature: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name, "args": self.args}
        if self.thought_signature is not None:
            out["thoughtSignature"] = self.thought_signature
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(
            id=str(data["id"]),
            name=str(data["name"]),
            args=data.get("args"),
            thought_signature=data.get("thoughtSignature"),
        )


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message. ``tool_calls`` only on assistant turns, ``tool_call_id`` only on tool."""

    role: Role
    content: str
    tool_call_id: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_call_id is not None:
            out["toolCallId"] = self.tool_call_id
        if self.tool_calls:
            out["toolCalls"] = [call.to_json() for call in self.tool_calls]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Message:
        calls = tuple(ToolCall.from_json(c) for c in data.get("toolCalls") or ())
        role = data["role"]
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"unknown message role {role!r}")
        return cls(role, str(data.get("content") or ""), data.get("toolCallId"), calls)


def system(content: str) -> Message:
    return Message("system", content)


def user(content: str) -> Message:
    return Message("user", content)


@dataclass(frozen=True, slots=True)
class ToolAnnotations:
    effect: ToolEffect | None = None
    idempotent: bool | None = None
    destructive: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in (
                ("effect", self.effect),
                ("idempotent", self.idempotent),
                ("destructive", self.destructive),
            )
            if v is not None
        }


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """What the model sees of a tool."""

    name: str
    description: str
    parameters: JsonSchema
    annotations: ToolAnnotations | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-run limits (spec §4.6). ``max_tool_calls`` is shared with every sub-agent of a run."""

    max_tool_calls: int = 50
    max_sub_agent_depth: int = 3
    tool_call_timeout_s: float = 300.0
    max_steps: int = 10
    max_result_chars: int = 50_000
    max_tool_argument_bytes: int = 256 * 1024
    """JSON bytes of one call's arguments; a larger call is refused (the model reads why), so
    its ``tool_call`` event stays under the server's event cap."""


ExecuteTool = Callable[[str, Any], Awaitable[Any]]


@dataclass(slots=True)
class AgentInput:
    """What an adapter is asked to answer (spec §3.1 ``AgentInput``)."""

    messages: list[Message]
    tools: list[ToolDefinition] = field(default_factory=list)
    thread_id: str = ""
    extensions: dict[str, Any] | None = None
    signal: asyncio.Event | None = None
    auth_headers: Callable[[], Awaitable[dict[str, str]]] | None = None
    """Headers to call the model with instead of the adapter's own credentials: the caller's,
    for an ``auth: on-behalf-of-user`` agent."""


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """The end of one model turn: the text it produced, the tool calls it asked for, and the
    usage the model reported (None when it reported none)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: ModelUsage | None = None


TurnItem = AgentEvent | TurnOutcome


class ModelAdapter(Protocol):
    """A model: streams one turn at a time; the agent loop owns tool execution and checkpoints.

    ``turn`` yields events (``message_delta``, ``thinking``, ``status`` …) and ends with exactly one
    :class:`TurnOutcome`, or raises :class:`shared.agents.errors.ModelError`.
    """

    name: str
    accepts_extensions: frozenset[str]
    consumes_input_tools: bool

    def turn(self, request: AgentInput) -> AsyncGenerator[TurnItem, None]: ...


# --- event constructors (spec §3.1) ---------------------------------------------------------


def message_delta(content: str) -> AgentEvent:
    return {"type": "message_delta", "content": content}


def message(content: str) -> AgentEvent:
    return {"type": "message", "content": content}


def thinking(content: str) -> AgentEvent:
    return {"type": "thinking", "content": content}


def status(state: str, error: str | None = None) -> AgentEvent:
    event: AgentEvent = {"type": "status", "status": state}
    if error is not None:
        event["error"] = error
    return event


def tool_call_event(call: ToolCall) -> AgentEvent:
    return {"type": "tool_call", "callId": call.id, "name": call.name, "args": call.args}


def tool_result_event(call_id: str, result: Any, error: str | None = None) -> AgentEvent:
    event: AgentEvent = {"type": "tool_result", "callId": call_id, "result": result}
    if error is not None:
        event["error"] = error
    return event
