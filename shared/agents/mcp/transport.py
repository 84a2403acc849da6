"""The HTTP underneath an MCP connection: pinned to vetted addresses, credentials scoped.

:class:`PinnedBackend` is the only way the connection reaches the network: it dials the
addresses :func:`assert_resolved_host_safe` vetted for the admitted host (checked again, never
re-resolved), and refuses any other host, so the policy holds before the first byte of every TCP
connection, keep-alive reconnects included. TLS still verifies the certificate against the host
name. :class:`ScopedAuth` decides the ``Authorization`` header per request (spec §5.5).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator
from typing import Any

import httpcore2
import httpx2

from tether.agents.mcp.addresses import is_blocked_ip
from tether.agents.mcp.config import ServiceAuth

MAX_RESPONSE_BYTES = 1024 * 1024

_caller_authorization: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "mcp_caller_authorization", default=None
)

_ERRORS: tuple[tuple[type[Exception], type[httpx2.TransportError]], ...] = (
    (httpcore2.ConnectTimeout, httpx2.ConnectTimeout),
    (httpcore2.ReadTimeout, httpx2.ReadTimeout),
    (httpcore2.WriteTimeout, httpx2.WriteTimeout),
    (httpcore2.PoolTimeout, httpx2.PoolTimeout),
    (httpcore2.ConnectError, httpx2.ConnectError),
    (httpcore2.ReadError, httpx2.ReadError),
    (httpcore2.WriteError, httpx2.WriteError),
    (httpcore2.RemoteProtocolError, httpx2.RemoteProtocolError),
    (httpcore2.LocalProtocolError, httpx2.LocalProtocolError),
    (httpcore2.UnsupportedProtocol, httpx2.UnsupportedProtocol),
    (httpcore2.TimeoutException, httpx2.TimeoutException),
    (httpcore2.NetworkError, httpx2.NetworkError),
    (httpcore2.ProtocolError, httpx2.ProtocolError),
)


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    """httpcore2's errors as httpx2's, as httpx2's own transport raises them."""
    try:
        yield
    except Exception as exc:
        for core, mapped in _ERRORS:
            if isinstance(exc, core):
                raise mapped(type(exc).__name__) from None
        raise


@contextlib.contextmanager
def calling_as(authorization: str | None) -> Iterator[None]:
    """Within the block, a ``tools/call`` carries this ``Authorization`` (the caller's)."""
    token = _caller_authorization.set(authorization)
    try:
        yield
    finally:
        _caller_authorization.reset(token)


class PinnedBackend(httpcore2.AsyncNetworkBackend):
    """Dials only ``addresses`` (vetted for ``hostname``), whatever the pool asks for."""

    def __init__(
        self,
        hostname: str,
        addresses: Iterable[str],
        *,
        allow_localhost: bool,
        inner: httpcore2.AsyncNetworkBackend | None = None,
    ) -> None:
        self.hostname = hostname.strip("[]").lower()
        self.addresses = tuple(addresses)
        self.allow_localhost = allow_localhost
        self.inner = inner or httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2's signature)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        if host.strip("[]").lower() != self.hostname:
            raise httpcore2.ConnectError("refused: not the vetted MCP host")
        failure: Exception = httpcore2.ConnectError("no vetted address")
        for address in self.addresses:
            if is_blocked_ip(address, self.allow_localhost):
                raise httpcore2.ConnectError("refused: a blocked address")
            try:
                return await self.inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2's signature)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("refused: MCP connections use TCP")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _CappedBody(httpx2.AsyncByteStream):
    def __init__(self, stream: Any, limit: int | None) -> None:
        self._stream = stream
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        with _httpx_errors():
            async for part in self._stream:
                seen += len(part)
                if self._limit is not None and seen > self._limit:
                    raise httpx2.ReadError(f"MCP response exceeds {self._limit} bytes")
                yield part

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            await self._stream.aclose()


class GuardedTransport(httpx2.AsyncBaseTransport):
    """httpx2's transport on a pinned connection pool; a POST's answer is capped in size."""

    def __init__(self, backend: PinnedBackend, max_response_bytes: int = MAX_RESPONSE_BYTES):
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(), network_backend=backend, max_connections=20
        )
        self._max = max_response_bytes
        self.session_lost = False
        """The server answered a request naming the session with 404: it no longer knows it."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        core = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _httpx_errors():
            response = await self._pool.handle_async_request(core)
        lost = response.status == 404 and "mcp-session-id" in request.headers
        if lost and request.method == "POST":  # not a GET stream a server may not serve
            self.session_lost = True
        limit = self._max if request.method == "POST" else None
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_CappedBody(response.stream, limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def _rpc_method(request: httpx2.Request) -> str | None:
    if request.method != "POST":
        return None
    try:
        body = json.loads(request.content)
    except (ValueError, UnicodeDecodeError):
        return None
    return body.get("method") if isinstance(body, dict) else None


class ScopedAuth(httpx2.Auth):
    """For a connection that may carry workspace credentials: ``tools/call`` goes as the caller
    when there is one (:func:`calling_as`), everything else (discovery, ``tools/list``, the
    event stream) as the service principal. Never installed on any other connection."""

    requires_request_body = True

    def __init__(self, service: ServiceAuth) -> None:
        self._service = service

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        await request.aread()
        caller = _caller_authorization.get()
        if caller is not None and _rpc_method(request) == "tools/call":
            value: str | None = caller
        else:
            value = await self._service()
        if value:
            request.headers["Authorization"] = value
        yield request
