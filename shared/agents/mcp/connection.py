"""One MCP session to one server, on the official SDK's streamable-HTTP client.

The SDK's client lives in anyio task groups that must be entered and left by the same task,
while calls come from many invocations' tasks: so each connection is *owned* by a task of its
own (started with an empty context), which opens the client, waits until asked to close, and
closes it. Callers use the open session from their own tasks. A connection whose owner ended
(the server went away, a transport error) is not usable; the pool opens a new one next time.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any

import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    CONNECTION_CLOSED,
    PARSE_ERROR,
    REQUEST_TIMEOUT,
    CallToolResult,
    TextContent,
    Tool,
)

from tether.agents.mcp.config import ServiceAuth
from tether.agents.mcp.errors import McpRefused, McpSessionLost, McpUnavailable
from tether.agents.mcp.policy import Admission
from tether.agents.mcp.specs import CallOutcome, McpToolSpec
from tether.agents.mcp.transport import (
    GuardedTransport,
    PinnedBackend,
    ScopedAuth,
    calling_as,
)
from tether.jsonvalue import dumps, storable

log = logging.getLogger(__name__)

QUIET_LOGGERS = ("httpx2", "mcp.client")
"""Libraries logging a line per request at INFO: httpx2 with the full URL (where an MCP server's
key may sit) and the SDK with the session id. Set to WARNING, unless a level was set for them."""
for _name in QUIET_LOGGERS:
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(logging.WARNING)

MAX_LIST_PAGES = 20
MAX_ERROR_CHARS = 2000
MAX_DESCRIPTION_CHARS = 4000


def error_types(exc: BaseException) -> str:
    """``ConnectError`` or ``ExceptionGroup[ConnectError, ReadError]``: types, never text."""
    if isinstance(exc, BaseExceptionGroup):
        inner = ", ".join(dict.fromkeys(error_types(e) for e in exc.exceptions))
        return f"{type(exc).__name__}[{inner}]"
    return type(exc).__name__


class McpConnection:
    """A session to ``admission.url`` that dials only ``backend``'s vetted addresses."""

    def __init__(
        self,
        name: str,
        admission: Admission,
        backend: PinnedBackend,
        service: ServiceAuth | None,
        read_timeout_s: float,
    ) -> None:
        self.name = name
        self.admission = admission
        self.loop = asyncio.get_running_loop()
        self._transport = GuardedTransport(backend)
        self._service = service if admission.forward_auth else None
        self._read_timeout_s = read_timeout_s
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None

    @property
    def usable(self) -> bool:
        owner = self._owner
        alive = owner is not None and not owner.done() and self._client is not None
        return alive and not self._transport.session_lost

    async def open(self, timeout_s: float) -> None:
        """Start the owner and wait for the session; raises :class:`McpUnavailable`."""
        self._owner = asyncio.get_running_loop().create_task(
            self._own(), name=f"mcp:{self.name}", context=contextvars.Context()
        )
        try:
            await asyncio.wait_for(self._ready.wait(), timeout_s)
        except TimeoutError:
            log.warning("MCP server '%s': no session within %gs", self.name, timeout_s)
            self._owner.cancel()  # still opening: nothing to close gracefully
            await asyncio.wait([self._owner], timeout=5)
        if not self.usable:
            raise McpUnavailable(f"MCP server '{self.name}' is unavailable.")

    def _http(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            transport=self._transport,
            auth=ScopedAuth(self._service) if self._service is not None else None,
            trust_env=False,  # no proxy, no .netrc credentials from the environment
            follow_redirects=False,
            timeout=httpx2.Timeout(30.0, read=300.0),
        )

    async def _own(self) -> None:
        try:
            async with (
                self._http() as http,
                Client(
                    streamable_http_client(self.admission.url, http_client=http),
                    read_timeout_seconds=self._read_timeout_s,
                    cache=None,
                ) as client,
            ):
                self._client = client
                self._ready.set()
                await self._closing.wait()
        except Exception as exc:  # the session's end, for whatever reason: logged by type only
            log.warning("MCP server '%s': session ended (%s)", self.name, error_types(exc))
        finally:
            self._client = None
            self._ready.set()

    def _session(self) -> Client:
        client = self._client
        if client is None or not self.usable:
            raise McpUnavailable(f"MCP server '{self.name}' is unavailable.")
        return client

    async def list_tools(self) -> list[McpToolSpec]:
        """Every tool the server lists (following pagination); raises :class:`McpUnavailable`."""
        client = self._session()
        tools: list[McpToolSpec] = []
        cursor: str | None = None
        try:
            for _ in range(MAX_LIST_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools.extend(spec_of(self.name, t) for t in page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except Exception as exc:  # the SDK's or the transport's failure, by type
            log.warning("MCP server '%s': tools/list failed (%s)", self.name, error_types(exc))
            await self._raise_if_lost()
            raise McpUnavailable(f"MCP server '{self.name}' is unavailable.") from None
        return tools

    async def _raise_if_lost(self) -> None:
        """When the server no longer knows the session: close it, raise McpSessionLost."""
        if self._transport.session_lost:
            await self.aclose()
            raise McpSessionLost(f"MCP server '{self.name}' ended the session.")

    async def call_tool(
        self, tool: str, args: dict[str, Any], timeout_s: float, authorization: str | None
    ) -> CallOutcome:
        """One ``tools/call`` (as ``authorization``, when this connection may carry it).

        Raises :class:`McpRefused` for a JSON-RPC error answer, :class:`McpUnavailable` when
        the session failed (then closed) or the answer could not be read, TimeoutError past
        ``timeout_s``."""
        client = self._session()
        try:
            with calling_as(authorization if self._service is not None else None):
                result = await client.call_tool(tool, args, read_timeout_seconds=timeout_s)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise TimeoutError from None
            await self._raise_if_lost()  # the call was not run
            if exc.code == PARSE_ERROR:  # the SDK's parser's report (pydantic's): logged only
                log.warning("MCP server '%s': tools/call %s: unreadable answer", self.name, tool)
                raise McpUnavailable(
                    f"MCP server '{self.name}' sent an answer to '{tool}' that could not be read."
                ) from None
            if exc.code != CONNECTION_CLOSED:
                raise McpRefused(str(exc.error.message)[:MAX_ERROR_CHARS]) from None
            failure = "ConnectionClosed"
        except TimeoutError:
            raise
        except Exception as exc:  # the SDK's or the transport's failure, by type
            failure = error_types(exc)
        else:
            return outcome_of(result)
        log.warning("MCP server '%s': tools/call %s failed (%s)", self.name, tool, failure)
        await self.aclose()
        raise McpUnavailable(f"MCP server '{self.name}' did not answer the call to '{tool}'.")

    async def aclose(self) -> None:
        """Close the session (its owner leaves the client's context) and wait for the owner."""
        self._closing.set()
        owner = self._owner
        if owner is None or owner.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(owner), 10)
        except TimeoutError:
            owner.cancel()


def spec_of(server: str, tool: Tool) -> McpToolSpec:
    """What a run records of a listed tool."""
    hints: dict[str, bool] = {}
    if tool.annotations is not None:
        for key, value in tool.annotations.model_dump(by_alias=True).items():
            if isinstance(value, bool):
                hints[key] = value
    schema = dict(tool.input_schema) if isinstance(tool.input_schema, dict) else {}
    schema.setdefault("type", "object")
    description = (tool.description or f"MCP tool {tool.name}")[:MAX_DESCRIPTION_CHARS]
    return McpToolSpec(server, tool.name, description, schema, hints)


def outcome_of(result: CallToolResult) -> CallOutcome:
    """The text blocks joined (the structured content when there is no text block; other blocks
    named); an error's text is what the server said, cut to a bounded length."""
    texts = [b.text for b in result.content if isinstance(b, TextContent)]
    if not texts and result.structured_content is not None:
        text = dumps(storable(result.structured_content))  # a NUL must not lose a done call
    else:
        text = "\n".join(
            b.text if isinstance(b, TextContent) else f"[{getattr(b, 'type', 'non-text')} content]"
            for b in result.content
        )
    if result.is_error:
        return CallOutcome(
            (text.strip() or "The MCP tool reported an error.")[:MAX_ERROR_CHARS], True
        )
    return CallOutcome(text)
