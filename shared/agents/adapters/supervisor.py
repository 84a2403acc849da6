"""The AI Gateway Supervisor API (OpenAI Responses wire format) with hosted tools (spec §1)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from tether.agents.adapters.chat_stream import wire_json, wire_list
from tether.agents.adapters.http import AuthSource, DatabricksAuth, HttpStatusError, post_stream
from tether.agents.adapters.usage import responses_usage
from tether.agents.errors import (
    TRANSPORT,
    UPSTREAM_FAILED,
    UPSTREAM_TOOL,
    UPSTREAM_UNKNOWN,
    ModelError,
    StreamLimitExceeded,
    StreamTimeout,
    log_upstream,
    summarize,
)
from tether.agents.sse import SseEvent, read_sse
from tether.agents.types import (
    SUPERVISOR_NAMESPACE,
    AgentEvent,
    AgentInput,
    Message,
    TurnItem,
    TurnOutcome,
    message_delta,
    status,
)

if TYPE_CHECKING:
    from databricks.sdk.config import Config

log = logging.getLogger(__name__)

RESPONSES_PATH = "/ai-gateway/mlflow/v1/responses"  # fixed: never from user input (SSRF)
LABEL = "Supervisor API"
_TRANSPORT_ERRORS = (
    HttpStatusError,
    StreamLimitExceeded,
    StreamTimeout,
    aiohttp.ClientError,
    OSError,
    ValueError,
)


def build_body(model: str, request: AgentInput) -> dict[str, Any]:
    """System turns → ``instructions``; tool turns dropped; one user turn → a plain string."""
    instructions = [m.content for m in request.messages if m.role == "system"]
    turns: list[Message] = [m for m in request.messages if m.role in ("user", "assistant")]
    body: dict[str, Any] = {"model": model}
    if len(turns) == 1 and turns[0].role == "user":
        body["input"] = turns[0].content
    else:
        body["input"] = [{"role": m.role, "content": m.content} for m in turns]
    body["stream"] = True
    if instructions:
        body["instructions"] = "\n\n".join(instructions)
    extension = (request.extensions or {}).get(SUPERVISOR_NAMESPACE)
    hosted = extension.get("hostedTools") if isinstance(extension, dict) else None
    if isinstance(hosted, list) and hosted:
        body["tools"] = list(hosted)
    return body


def _completed_text(response: Any) -> str:
    if not isinstance(response, dict):
        return ""
    parts = []
    for item in wire_list(response.get("output")):
        if isinstance(item, dict) and item.get("type") == "message":
            for part in wire_list(item.get("content")):
                if isinstance(part, dict) and part.get("type") == "output_text":
                    parts.append(str(part.get("text") or ""))
    return "".join(parts)


@dataclass
class _StreamState:
    """What one Supervisor stream has shown so far (spec §1.4)."""

    counts: Counter[str] = field(default_factory=Counter)
    streamed_ids: set[str] = field(default_factory=set)
    delta_seen: bool = False
    anonymous_delta_open: bool = False
    text: str = ""
    last_completed: Any = None
    error_code: str | None = None

    def map(self, sse: SseEvent) -> list[AgentEvent]:
        if sse.data == "[DONE]":
            return []
        try:
            data = wire_json(sse.data)
        except ValueError:
            log.debug("skipping a Supervisor API frame that is not JSON")
            return []
        data = data if isinstance(data, dict) else {}
        kind = sse.event or str(data.get("type") or "")
        self.counts[kind] += 1
        if kind == "response.output_text.delta":
            return [self._delta(data)]
        if kind == "response.output_item.done":
            return self._item_done(data.get("item"))
        if kind == "response.completed":
            self.last_completed = data.get("response")
        elif kind == "response.failed":
            self._fail(
                UPSTREAM_FAILED,
                (data.get("response") or {}).get("error")
                if isinstance(data.get("response"), dict)
                else None,
            )
        elif kind == "error":
            detail = data.get("error")
            self._fail(UPSTREAM_UNKNOWN, "Unknown error" if detail is None else detail)
        return []

    def _fail(self, code: str, detail: Any) -> None:
        self.error_code = code
        log_upstream(LABEL, code, detail)

    def _delta(self, data: dict[str, Any]) -> AgentEvent:
        content = data["delta"] if isinstance(data.get("delta"), str) else ""
        item_id = data.get("item_id")
        if isinstance(item_id, str):
            self.streamed_ids.add(item_id)
        else:
            self.anonymous_delta_open = True
        self.delta_seen = True
        self.text += content
        return message_delta(content)

    def _item_done(self, item: Any) -> list[AgentEvent]:
        if not isinstance(item, dict):
            return []
        if item.get("type") == "error" or (
            item.get("id") == "error" and item.get("type") != "message"
        ):
            self._fail(UPSTREAM_TOOL, {"type": "error_item"})
            return []
        item_id = item.get("id")
        if item.get("type") != "message" or not item_id or str(item_id) in self.streamed_ids:
            return []
        if self.anonymous_delta_open:  # deltas without item_id already streamed this message
            self.anonymous_delta_open = False
            return []
        text = _completed_text({"output": [item]})
        if not text:
            return []
        self.streamed_ids.add(str(item_id))
        self.delta_seen = True
        self.text += text
        return [message_delta(text)]


class SupervisorAdapter:
    """Streams one Supervisor API response; hosted tools run upstream, so each run is one turn."""

    name = LABEL
    consumes_input_tools = False
    accepts_extensions = frozenset({SUPERVISOR_NAMESPACE})

    def __init__(
        self,
        model: str,
        *,
        config: Config | None = None,
        auth: AuthSource | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        self.model = model
        self.auth = auth or DatabricksAuth(config)  # resolves the credential chain now
        self.url = self.auth.base_url + RESPONSES_PATH
        self.timeout_s = timeout_s

    async def turn(self, request: AgentInput) -> AsyncGenerator[TurnItem, None]:
        signal = request.signal
        if signal is not None and signal.is_set():
            return
        state = _StreamState()
        try:
            async with contextlib.aclosing(
                self._events(build_body(self.model, request), signal, request.auth_headers)
            ) as events:
                async for sse in events:
                    for event in state.map(sse):
                        yield event
                    if state.error_code or (signal is not None and signal.is_set()):
                        break
        except _TRANSPORT_ERRORS as exc:
            if signal is not None and signal.is_set():
                return
            log_upstream(LABEL, TRANSPORT, f"{type(exc).__name__}: {exc}")
            raise ModelError(LABEL, TRANSPORT) from None
        if signal is not None and signal.is_set():
            return
        async for item in self._finish(state):
            yield item

    async def _finish(self, state: _StreamState) -> AsyncGenerator[TurnItem, None]:
        if not state.counts:
            log.warning("%s error (transport): the stream closed without an event", LABEL)
            raise ModelError(LABEL, TRANSPORT)
        if state.error_code:
            raise ModelError(LABEL, state.error_code)
        completed = state.last_completed
        if not state.delta_seen and (recovered := _completed_text(completed)):
            state.text = recovered
            yield message_delta(recovered)
        elif not state.delta_seen:
            log.warning(
                "%s stream produced no text; events %s; completed %s",
                LABEL,
                dict(state.counts),
                _completed_summary(completed),
            )
        if "response.completed" in state.counts:
            body = completed if isinstance(completed, dict) else {}
            if body.get("status") == "failed" or body.get("error") is not None:
                log_upstream(LABEL, UPSTREAM_FAILED, body.get("error"))
                raise ModelError(LABEL, UPSTREAM_FAILED)
            yield status("complete")
        yield TurnOutcome(state.text, usage=responses_usage(completed))

    async def _events(
        self,
        body: dict[str, Any],
        signal: asyncio.Event | None,
        auth_headers: Callable[[], Awaitable[dict[str, str]]] | None = None,
    ) -> AsyncGenerator[SseEvent, None]:
        headers = await (auth_headers or self.auth.headers)()
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        async for sse in read_sse(
            post_stream(self.url, body, headers), signal=signal, deadline=deadline
        ):
            yield sse


def _completed_summary(completed: Any) -> str:
    if not isinstance(completed, dict):
        return "<none>"
    return (
        f"status={summarize(completed.get('status'))} error={summarize(completed.get('error'))}"
        f" incomplete={summarize(completed.get('incomplete_details'))}"
    )
