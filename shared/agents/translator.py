"""AgentEvent → OpenAI Responses stream events (spec §3.3), terminal on error.

Unlike the reference, nothing follows ``response.failed``: ``finalize()`` after an error is a no-op.
A translator of an invocation's stream (one with a ``stream_id``) shows an approval only once the
run is parked on it (its ``run.waiting`` event), so a client that approves as soon as it reads
``appkit.approval_pending`` is never told the approval does not exist.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from tether.agents.approvals import PENDING
from tether.agents.types import AgentEvent

_MISSING = object()
RUN_WAITING = "run.waiting"
"""The durable run's event that lists what it is parked on (the gateway passes it on)."""
ITEM_IDS = uuid.UUID("3f1c1f5e-6f0b-4b36-9a55-2f3d1b0c7a11")
"""The namespace of the output items' ids (:meth:`ResponsesTranslator._item_id`)."""
_PASSTHROUGH = {
    "thinking": ("appkit.thinking", ("content",)),
    "metadata": ("appkit.metadata", ("data",)),
    "structured_output": ("appkit.structured_output", ("data",)),
}


@dataclass
class _OpenMessage:
    id: str
    index: int
    text: str = ""


class ResponsesTranslator:
    """One per response stream: strictly increasing ``sequence_number`` and ``output_index``."""

    def __init__(self, stream_id: str | None = None) -> None:
        self.stream_id = stream_id
        """The invocation id on ``/api/agents/chat``: AppKit clients approve by it."""
        self._seq = 0
        self._next_index = 0
        self._message: _OpenMessage | None = None
        self._unparked: dict[str, AgentEvent] = {}
        """``approval.pending`` events by approval id, until ``run.waiting`` lists their wait."""
        self.finalized = False

    def _out(self, event: dict[str, Any]) -> dict[str, Any]:
        event["sequence_number"] = self._seq
        self._seq += 1
        return event

    def translate(self, event: AgentEvent) -> list[dict[str, Any]]:
        if self.finalized:
            return []
        kind = event.get("type")
        if kind == "message_delta":
            return self._delta(str(event.get("content") or ""))
        if kind == "message":
            return self._message_final(str(event.get("content") or ""))
        if kind == "tool_call":
            args = event.get("args")
            return self._item(
                "fc",
                {
                    "type": "function_call",
                    "call_id": event.get("callId"),
                    "name": event.get("name"),
                    "arguments": args if isinstance(args, str) else _compact(args),
                },
            )
        if kind == "tool_result":
            return self._item(
                "fc_output",
                {
                    "type": "function_call_output",
                    "call_id": event.get("callId"),
                    "output": _output(event),
                },
            )
        if kind in _PASSTHROUGH:
            name, keys = _PASSTHROUGH[kind]
            return [self._out({"type": name, **{k: event.get(k) for k in keys}})]
        if kind == PENDING:
            if self.stream_id is None:
                return [self._out(_approval(event))]
            self._unparked[str(event.get("approval_id"))] = event
            return []
        if kind == RUN_WAITING:
            return self._parked(event)
        if kind == "status":
            return self._status(event)
        return []  # telemetry (model_start, model_end, remote_trace) is not streamed

    def _parked(self, event: AgentEvent) -> list[dict[str, Any]]:
        """The approvals the run now waits on (the store committed the wait with this event, so
        ``/api/agents/approve`` finds it), with ``stream_id``, which that route takes."""
        waits = event.get("waiting_for")
        names = (
            {w.get("wait") for w in waits if isinstance(w, dict)}
            if isinstance(waits, list)
            else set()
        )
        out = []
        for approval_id in [a for a in self._unparked if a in names]:
            approval = _approval(self._unparked.pop(approval_id))
            approval["stream_id"] = self.stream_id
            out.append(self._out(approval))
        return out

    def fail(self, message: str) -> list[dict[str, Any]]:
        """``error`` then ``response.failed``, once; nothing follows (the port's fix)."""
        if self.finalized:
            return []
        self.finalized = True
        return [
            self._out({"type": "error", "error": message or "Unknown error"}),
            self._out({"type": "response.failed"}),
        ]

    def _status(self, event: AgentEvent) -> list[dict[str, Any]]:
        if event.get("status") == "error":
            return self.fail(str(event.get("error") or ""))
        if event.get("status") == "complete":
            return self.finalize()
        return []

    def _open(self) -> tuple[_OpenMessage, list[dict[str, Any]]]:
        if self._message is not None:
            return self._message, []
        index = self._claim()
        self._message = _OpenMessage(self._item_id("msg", index), index)
        added = self._out(
            {
                "type": "response.output_item.added",
                "output_index": self._message.index,
                "item": {
                    "type": "message",
                    "id": self._message.id,
                    "status": "in_progress",
                    "role": "assistant",
                    "content": [],
                },
            }
        )
        return self._message, [added]

    def _item_id(self, prefix: str, index: int) -> str:
        """The id of the item at ``index``: the same in every stream of one invocation (a client
        that reconnects meets the ids it saw), random without one (a translator of its own)."""
        if self.stream_id is None:
            return f"{prefix}_{uuid.uuid4().hex}"
        return f"{prefix}_{uuid.uuid5(ITEM_IDS, f'{self.stream_id}/{index}').hex}"

    def _claim(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index

    def _delta(self, content: str) -> list[dict[str, Any]]:
        message, out = self._open()
        message.text += content
        out.append(
            self._out(
                {
                    "type": "response.output_text.delta",
                    "item_id": message.id,
                    "output_index": message.index,
                    "content_index": 0,
                    "delta": content,
                }
            )
        )
        return out

    def _message_final(self, content: str) -> list[dict[str, Any]]:
        message, out = self._open()
        message.text = content
        return out + self._close()

    def _close(self) -> list[dict[str, Any]]:
        message, self._message = self._message, None
        if message is None:
            return []
        return [
            self._out(
                {
                    "type": "response.output_item.done",
                    "output_index": message.index,
                    "item": {
                        "type": "message",
                        "id": message.id,
                        "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": message.text}],
                    },
                }
            )
        ]

    def _item(self, prefix: str, item: dict[str, Any]) -> list[dict[str, Any]]:
        out = self._close()
        index = self._claim()
        item = {"type": item["type"], "id": self._item_id(prefix, index), **item}
        out.append(
            self._out({"type": "response.output_item.added", "output_index": index, "item": item})
        )
        out.append(
            self._out({"type": "response.output_item.done", "output_index": index, "item": item})
        )
        return out

    def finalize(self) -> list[dict[str, Any]]:
        """Close the open message and emit ``response.completed``; idempotent."""
        if self.finalized:
            return []
        self.finalized = True
        return self._close() + [self._out({"type": "response.completed", "response": {}})]


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _output(event: AgentEvent) -> str:
    if event.get("error"):
        return str(event["error"])
    result = event.get("result", _MISSING)
    if result is _MISSING:
        return ""
    return result if isinstance(result, str) else _compact(result)


def _approval(event: AgentEvent) -> dict[str, Any]:
    """``approval.pending`` as the reference's ``appkit.approval_pending``; ``stream_id`` (the
    invocation id) is added on ``/api/agents/chat``, where ``/api/agents/approve`` takes it."""
    keys = ("approval_id", "tool_name", "args", "annotations", "agent")
    return {"type": "appkit.approval_pending", **{k: event.get(k) for k in keys}}
