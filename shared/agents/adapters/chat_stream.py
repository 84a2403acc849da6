"""Chat-completions wire format: names, history, the streamed delta parser and text tool calls."""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether import ModelUsage
from tether.agents.adapters.usage import chat_usage
from tether.agents.errors import DefinitionError, StreamLimitExceeded
from tether.agents.tools import wire_name
from tether.agents.types import (
    AgentEvent,
    Message,
    ToolCall,
    ToolDefinition,
    message_delta,
    thinking,
)
from tether.jsonvalue import MAX_DEPTH, deeper_than, dumps, may_nest_deeper

log = logging.getLogger(__name__)

MAX_STREAM_TEXT_CHARS = 4_194_304
MAX_TOOL_ARGUMENTS_CHARS = 2_097_152
TEXT_TOOL_PARSE_MAX_INPUT = 65_536


def wire_names(tools: Sequence[ToolDefinition]) -> dict[str, str]:
    """Map wire name → original name; raises on two tools that map to one wire name."""
    reverse: dict[str, str] = {}
    for tool in tools:
        wire = wire_name(tool.name)
        if wire in reverse and reverse[wire] != tool.name:
            raise DefinitionError(
                f"Tool name collision: '{reverse[wire]}' and '{tool.name}' both map to wire "
                f"name '{wire}'"
            )
        reverse[wire] = tool.name
    return reverse


def wire_tools(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": wire_name(t.name),
                "description": t.description,
                "parameters": t.parameters,
            },
        }
        for t in tools
    ]


def _wire_call(call: ToolCall) -> dict[str, Any]:
    args = call.args if isinstance(call.args, str) else dumps(call.args)
    out: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {"name": wire_name(call.name), "arguments": args},
    }
    if call.thought_signature is not None:
        out["thoughtSignature"] = call.thought_signature
    return out


def wire_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """History in chat-completions form (spec §2.2)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            item["content"] = m.content if m.content.strip() else None
            item["tool_calls"] = [_wire_call(c) for c in m.tool_calls]
        if m.tool_call_id is not None:
            item["tool_call_id"] = m.tool_call_id
        out.append(item)
    return out


def wire_json(text: str) -> Any:
    """Upstream JSON as ``json.loads`` reads it (a NUL is made storable later, not refused).
    JSON nested more than :data:`MAX_DEPTH` levels is invalid like any other (a ValueError): too
    deep for the parser it raised RecursionError out of the adapter, and too deep for
    ``storable`` it did so once the turn ended, failing the run either way."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if may_nest_deeper(text) and deeper_than(value, MAX_DEPTH):
        raise ValueError("JSON nested too deeply")
    return value


def parse_arguments(raw: str) -> Any:
    """Parsed JSON arguments; invalid JSON stays a string so dispatch rejects it visibly."""
    try:
        return wire_json(raw)
    except ValueError:
        log.debug("tool call arguments are not valid JSON (%d chars)", len(raw))
        return raw


def wire_list(value: Any) -> list[Any]:
    """``value`` when the wire gave a list there, else nothing: a malformed chunk is skipped,
    never a failed turn."""
    return value if isinstance(value, list) else []


@dataclass
class _PendingCall:
    id: str
    name: str
    arguments: str
    thought_signature: str | None = None


@dataclass
class ChatDeltaParser:
    """Accumulates one streamed completion: text, reasoning, tool calls keyed by ``index`` and
    the usage the endpoint reported. An endpoint that answers with one JSON completion instead
    of a stream is read whole when the body ends (:meth:`finish`). ``answered`` says whether any
    of the body was an answer: a chunk of a completion (``choices`` or ``usage``), ``[DONE]``,
    or a whole completion; a streamed ``{"error": ...}`` is none."""

    max_text_chars: int = MAX_STREAM_TEXT_CHARS
    max_argument_chars: int = MAX_TOOL_ARGUMENTS_CHARS
    text: str = ""
    calls: dict[int, _PendingCall] = field(default_factory=dict)
    usage: ModelUsage | None = None
    streamed: bool = False
    body: list[str] = field(default_factory=list)
    body_chars: int = 0
    answered: bool = False

    def feed_line(self, line: str) -> list[AgentEvent]:
        """Events for one wire line; only ``data: `` lines (with the space) count (spec §2.3)."""
        stripped = line.strip()
        if not stripped.startswith("data: "):
            self._keep(line)
            return []
        self.streamed = True
        data = stripped[len("data: ") :]
        if data == "[DONE]":
            self.answered = True
            return []
        try:
            payload = wire_json(data)
        except ValueError:
            log.debug("skipping a malformed chat-completions chunk")
            return []
        if isinstance(payload, dict) and ("choices" in payload or "usage" in payload):
            self.answered = True  # a chunk of a completion: not a streamed error object
        return self.feed(payload)

    def _keep(self, line: str) -> None:
        """A line that is not SSE data: part of a non-streamed answer, until the body ends."""
        if self.streamed or self.body_chars + len(line) > self.max_text_chars:
            return
        self.body.append(line)
        self.body_chars += len(line) + 1

    def finish(self) -> list[AgentEvent]:
        """At the end of the body: the events of a non-streamed answer (``choices[0].message``
        read as one delta), if that is what came; nothing after a stream."""
        if self.streamed or not self.body:
            return []
        try:
            payload = wire_json("\n".join(self.body))
        except ValueError:
            return []
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return []
        message = choices[0].get("message")
        if not isinstance(message, dict):
            return []
        self.answered = True
        calls = wire_list(message.get("tool_calls"))
        delta = {
            **message,
            "tool_calls": [{**c, "index": i} for i, c in enumerate(calls) if isinstance(c, dict)],
        }
        return self.feed({"choices": [{"delta": delta}], "usage": payload.get("usage")})

    def feed(self, payload: Any) -> list[AgentEvent]:
        self.usage = chat_usage(payload) or self.usage
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return []
        delta = choices[0].get("delta")
        if not isinstance(delta, dict):
            return []
        events = self._content(delta.get("content"))
        for chunk in wire_list(delta.get("tool_calls")):
            if isinstance(chunk, dict):
                self._tool_chunk(chunk)
        return events

    def _append_text(self, text: str) -> AgentEvent:
        if len(self.text) + len(text) > self.max_text_chars:
            raise StreamLimitExceeded(
                "DatabricksAdapter: streamed assistant text exceeds configured limit "
                f"({self.max_text_chars} UTF-16 code units)"
            )
        self.text += text
        return message_delta(text)

    def _content(self, content: Any) -> list[AgentEvent]:
        if isinstance(content, str):
            return [self._append_text(content)] if content else []
        if not isinstance(content, list):
            return []
        events: list[AgentEvent] = []
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                events.append(self._append_text(part["text"]))
            elif part.get("type") == "reasoning":
                for item in wire_list(part.get("summary")):
                    if isinstance(item, dict) and isinstance(item.get("text"), str):
                        events.append(thinking(item["text"]))
        return events

    def _tool_chunk(self, chunk: dict[str, Any]) -> None:
        index = chunk.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            return
        raw_function = chunk.get("function")
        function: dict[str, Any] = raw_function if isinstance(raw_function, dict) else {}
        arguments = function.get("arguments")
        arguments = arguments if isinstance(arguments, str) else ""
        signature = chunk.get("thoughtSignature") or chunk.get("thought_signature")
        pending = self.calls.get(index)
        if pending is None:
            pending = _PendingCall(
                str(chunk.get("id") or f"call_{index}"), str(function.get("name") or ""), ""
            )
            self.calls[index] = pending
        if len(pending.arguments) + len(arguments) > self.max_argument_chars:
            raise StreamLimitExceeded(
                f"DatabricksAdapter: tool call arguments exceed {self.max_argument_chars} chars"
            )
        pending.arguments += arguments
        if isinstance(signature, str) and pending.thought_signature is None:
            pending.thought_signature = signature

    def tool_calls(self, reverse_names: dict[str, str]) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(
                p.id,
                reverse_names.get(p.name, p.name),
                parse_arguments(p.arguments or "{}"),
                p.thought_signature,
            )
            for _, p in sorted(self.calls.items())
        )


_PY_CALL = re.compile(r"([A-Za-z_][\w.-]*)\(([^()]*)\)")
_PY_ARG = re.compile(r"\s*([A-Za-z_]\w*)\s*=\s*('[^']*'|\"[^\"]*\"|[^,]*)\s*(?:,|$)")


def _llama_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    start, end = text.find("[{"), text.rfind("}]")
    if start < 0 or end < start:
        return []
    try:
        items = wire_json(text[start : end + 2])
    except ValueError:
        return []
    calls = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return []
        args: Any = next((item[k] for k in ("parameters", "arguments", "args") if k in item), {})
        calls.append((item["name"], args if isinstance(args, dict) else {}))
    return calls


def _python_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        return []
    calls = []
    for match in _PY_CALL.finditer(body[1:-1]):
        args: dict[str, Any] = {}
        for arg in _PY_ARG.finditer(match.group(2)):
            value = arg.group(2).strip()
            if value[:1] in ("'", '"'):
                value = str(ast.literal_eval(value))
            args[arg.group(1)] = value
        calls.append((match.group(1), args))
    return calls


def parse_text_tool_calls(text: str, known: set[str]) -> tuple[ToolCall, ...]:
    """Tool calls written as text by models without native tool calling (spec §2.4)."""
    if not known or len(text) > TEXT_TOOL_PARSE_MAX_INPUT:
        return ()
    found = _llama_calls(text) or _python_calls(text)
    if not found or any(name not in known for name, _ in found):
        return ()
    return tuple(ToolCall(f"text_call_{i}", name, args) for i, (name, args) in enumerate(found))
