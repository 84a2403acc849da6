"""A scripted model: deterministic replies and tool calls, for tests, demos and examples.

The turn to play is chosen from the conversation itself (the number of assistant turns since the
last user message), so a replacement attempt resuming from a checkpoint plays the same script.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether import ModelUsage
from tether.agents.errors import DefinitionError, ModelError
from tether.agents.types import (
    AgentInput,
    Message,
    ToolCall,
    TurnItem,
    TurnOutcome,
    message_delta,
    thinking,
)

_WORDS = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True, slots=True)
class ScriptedTurn:
    """One model turn. ``text`` may use ``{input}`` (last user message) and ``{result}``."""

    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    thinking: str | None = None
    error: str | None = None  # raise ModelError with this code instead of answering
    usage: tuple[int, int] | None = None
    """(input, output) tokens to report as the turn's usage; None reports none (estimated)."""

    @classmethod
    def parse(cls, raw: Any) -> ScriptedTurn:
        """A turn from YAML/JSON: a string, or ``{text, tool_calls: [{name, args}], thinking}``."""
        if isinstance(raw, ScriptedTurn):
            return raw
        if isinstance(raw, str):
            return cls(text=raw)
        if not isinstance(raw, dict):
            raise DefinitionError("a script turn must be a string or a mapping")
        calls = []
        for call in raw.get("tool_calls") or ():
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise DefinitionError("a scripted tool call needs a 'name'")
            args = call.get("args") or {}
            if not isinstance(args, dict):
                raise DefinitionError(
                    f"a scripted tool call's 'args' must be a mapping ({call['name']})"
                )
            calls.append((call["name"], dict(args)))
        usage = raw.get("usage")
        reported = None
        if usage is not None:
            if not isinstance(usage, dict) or not all(
                isinstance(usage.get(k), int) and usage[k] >= 0
                for k in ("input_tokens", "output_tokens")
            ):
                raise DefinitionError("a scripted usage is {input_tokens, output_tokens}")
            reported = (usage["input_tokens"], usage["output_tokens"])
        text = str(raw.get("text") or "")
        return cls(text, tuple(calls), raw.get("thinking"), raw.get("error"), reported)


def _turn_index(messages: Sequence[Message]) -> int:
    index = 0
    for m in messages:
        if m.role == "user":
            index = 0
        elif m.role == "assistant":
            index += 1
    return index


def _fill(text: str, messages: Sequence[Message]) -> str:
    last_user = next((m.content for m in reversed(messages) if m.role == "user"), "")
    last_tool = next((m.content for m in reversed(messages) if m.role == "tool"), "")
    return text.replace("{input}", last_user).replace("{result}", last_tool)


@dataclass
class ScriptedModel:
    """Plays ``script`` turn by turn; past its end it answers with an empty text."""

    script: Sequence[ScriptedTurn]
    name: str = "Scripted model"
    accepts_extensions: frozenset[str] = frozenset()
    consumes_input_tools: bool = True
    requests: list[AgentInput] = field(default_factory=list)

    @classmethod
    def of(cls, *turns: Any) -> ScriptedModel:
        return cls([ScriptedTurn.parse(t) for t in turns])

    async def turn(self, request: AgentInput) -> AsyncGenerator[TurnItem, None]:
        self.requests.append(request)
        index = _turn_index(request.messages)
        step = self.script[index] if index < len(self.script) else ScriptedTurn()
        if step.error:
            raise ModelError(self.name, step.error)
        if step.thinking:
            yield thinking(step.thinking)
        text = _fill(step.text, request.messages)
        for word in _WORDS.findall(text):
            yield message_delta(word)
        calls = tuple(
            ToolCall(f"call_{index}_{i}", name, args)
            for i, (name, args) in enumerate(step.tool_calls)
        )
        usage = None if step.usage is None else ModelUsage(*step.usage)
        yield TurnOutcome(text, calls, usage)
