"""Chat-completions adapter: Databricks Model Serving, the AI Gateway and OpenAI-compatible APIs.

All three share one code path; only the URL, the auth source and ``model`` in the body differ.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp

from tether.agents.adapters.chat_stream import (
    MAX_STREAM_TEXT_CHARS,
    MAX_TOOL_ARGUMENTS_CHARS,
    ChatDeltaParser,
    parse_text_tool_calls,
    wire_messages,
    wire_names,
    wire_tools,
)
from tether.agents.adapters.http import (
    AuthSource,
    BearerAuth,
    DatabricksAuth,
    HttpStatusError,
    post_stream,
)
from tether.agents.errors import (
    HTTP_STATUS,
    LIMIT,
    TRANSPORT,
    ModelError,
    StreamLimitExceeded,
    StreamTimeout,
    log_upstream,
)
from tether.agents.sse import MAX_LINE_CHARS, guarded, read_lines
from tether.agents.types import AgentInput, TurnItem, TurnOutcome

if TYPE_CHECKING:
    from databricks.sdk.config import Config

log = logging.getLogger(__name__)

ENDPOINT_ENV = "DATABRICKS_SERVING_ENDPOINT_NAME"
GENERATION_PARAMS = ("temperature", "top_p", "stop", "frequency_penalty", "presence_penalty")
DEFAULT_TIMEOUT_S = 120.0


class ChatCompletionsAdapter:
    """Streams chat completions; one HTTP request per model turn, auth headers fetched each time."""

    consumes_input_tools = True
    accepts_extensions: frozenset[str] = frozenset()

    def __init__(
        self,
        auth: AuthSource,
        path: str,
        *,
        model: str | None = None,
        label: str = "Databricks API",
        max_tokens: int = 4096,
        generation_params: Mapping[str, Any] | None = None,
        max_sse_line_chars: int = MAX_LINE_CHARS,
        max_stream_text_chars: int = MAX_STREAM_TEXT_CHARS,
        max_tool_arguments_chars: int = MAX_TOOL_ARGUMENTS_CHARS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        stream_usage: bool = False,
    ) -> None:
        self.auth = auth
        self.url = auth.base_url + path
        self.model = model
        self.name = label
        self.max_tokens = max_tokens
        params = generation_params or {}
        self.generation_params = {
            k: params[k] for k in GENERATION_PARAMS if params.get(k) is not None
        }
        self.max_sse_line_chars = max_sse_line_chars
        self.max_stream_text_chars = max_stream_text_chars
        self.max_tool_arguments_chars = max_tool_arguments_chars
        self.timeout_s = timeout_s
        self.stream_usage = stream_usage
        """Ask for the usage in the stream's last chunk (``stream_options.include_usage``),
        for APIs that report it only when asked (OpenAI's); Model Serving reports it anyway."""

    def body(self, request: AgentInput) -> dict[str, Any]:
        """The JSON body of one turn (spec §2.2)."""
        wire_names(request.tools)  # raises on a name collision before any request is sent
        body: dict[str, Any] = {
            "messages": wire_messages(request.messages),
            "stream": True,
            "max_tokens": self.max_tokens,
            **self.generation_params,
        }
        if self.model is not None:
            body["model"] = self.model
        if self.stream_usage:
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = wire_tools(request.tools)
        return body

    async def turn(self, request: AgentInput) -> AsyncGenerator[TurnItem, None]:
        body = self.body(request)
        reverse = wire_names(request.tools)
        parser = ChatDeltaParser(self.max_stream_text_chars, self.max_tool_arguments_chars)
        try:
            lines_of = self._lines(body, request.signal, request.auth_headers)
            async with contextlib.aclosing(lines_of) as lines:
                async for line in lines:
                    for event in parser.feed_line(line):
                        yield event
            for event in parser.finish():  # an answer that came whole, not streamed
                yield event
        except HttpStatusError as exc:
            log.warning("%s error: HTTP %d", self.name, exc.status)
            raise ModelError(self.name, HTTP_STATUS, status=exc.status) from None
        except StreamLimitExceeded as exc:
            log.warning("%s error: %s", self.name, exc)
            raise ModelError(self.name, LIMIT) from exc
        except (StreamTimeout, aiohttp.ClientError, OSError, ValueError) as exc:
            log_upstream(self.name, TRANSPORT, f"{type(exc).__name__}: {exc}")
            raise ModelError(self.name, TRANSPORT) from None
        if request.signal is not None and request.signal.is_set():
            return
        if not parser.answered:  # an HTML page, garbage, an empty body: no answer at all
            log.warning("%s error (transport): the body was no chat completion", self.name)
            raise ModelError(self.name, TRANSPORT)
        calls = parser.tool_calls(reverse)
        if not calls:
            calls = tuple(
                type(c)(c.id, reverse.get(c.name, c.name), c.args)
                for c in parse_text_tool_calls(parser.text, set(reverse))
            )
        yield TurnOutcome(parser.text, calls, parser.usage)

    async def _lines(
        self,
        body: dict[str, Any],
        signal: asyncio.Event | None,
        auth_headers: Callable[[], Awaitable[dict[str, str]]] | None = None,
    ) -> AsyncGenerator[str, None]:
        headers = await (auth_headers or self.auth.headers)()
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        upstream = guarded(post_stream(self.url, body, headers), signal, deadline)
        async with contextlib.aclosing(upstream) as chunks:
            async for line in read_lines(chunks, max_line_chars=self.max_sse_line_chars):
                yield line


def _endpoint_name(endpoint: str | None) -> str:
    name = endpoint or os.environ.get(ENDPOINT_ENV)
    if not name:
        raise ValueError(f"no serving endpoint: pass one or set {ENDPOINT_ENV}")
    return name


def from_model_serving(
    endpoint: str | None = None, *, config: Config | None = None, **options: Any
) -> ChatCompletionsAdapter:
    """A Databricks Model Serving chat endpoint (task ``agent/*/chat`` or ``llm/v1/chat``)."""
    path = f"/serving-endpoints/{quote(_endpoint_name(endpoint), safe='')}/invocations"
    return ChatCompletionsAdapter(DatabricksAuth(config), path, **options)


def from_ai_gateway(
    model: str, *, config: Config | None = None, **options: Any
) -> ChatCompletionsAdapter:
    """The workspace AI Gateway's chat-completions route, with the model named in the body."""
    options.setdefault("stream_usage", True)
    return ChatCompletionsAdapter(
        DatabricksAuth(config), "/ai-gateway/mlflow/v1/chat/completions", model=model, **options
    )


def openai_compatible(
    model: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any
) -> ChatCompletionsAdapter:
    """Any OpenAI-compatible ``/chat/completions`` (defaults: OPENAI_BASE_URL, OPENAI_API_KEY)."""
    url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    options.setdefault("label", "Model API")
    options.setdefault("stream_usage", True)
    return ChatCompletionsAdapter(BearerAuth(url, key), "/chat/completions", model=model, **options)
