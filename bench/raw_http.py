"""A lean HTTP/1.1 client for the request-and-answer load: keep-alive connections over loopback,
each answer read by its ``Content-Length`` (or chunked), nothing else.

Why not aiohttp's client: on the two shared cores the bench client's own CPU is taken from the
servers it measures. aiohttp's spent 0.40-0.62 ms of the bench process's CPU per background
no-op (one POST, one status read), a quarter of the machine during Tether's burst; this one
spends 0.18-0.28 ms on the same requests. Every server of a scenario gets the same client
(docs/performance.md, "The client").

Only what the bench's servers answer is understood: a status line, headers, and a body framed by
``Content-Length`` or ``Transfer-Encoding: chunked`` (no ``HEAD``: its answer has a length and no
body). An answer framed otherwise (read until the connection closes, or a 1xx, 204 or 304
without a length) raises :class:`BadAnswer`, as does a connection lost mid-answer; a request
without its answer after ``timeout`` seconds (120, as the bench's aiohttp sessions allow) raises
``TimeoutError``. A connection the server has closed while idle (its end of file seen) is not
used again; one whose close is still on the way fails the request, as aiohttp's does. A
connection is used again only when its answer ended exactly where the bytes it received did,
and nothing arrived since.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, cast
from urllib.parse import urlsplit

import aiohttp

from bench.load import session
from tests.rawhttp import parse_head

CLIENT_ENV = "TETHER_BENCH_CLIENT"
"""``aiohttp``: the request load goes through aiohttp's client, as before the twenty-ninth session
(docs/performance.md, "The client"); unset or anything else: the lean one."""
TIMEOUT_S = 120.0
"""Seconds a request may take, its connection's opening included."""


class BadAnswer(Exception):
    """The server's answer is not HTTP/1.1 this client can frame, or the connection broke."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[Answer] | None = None
        self.closed = False
        self.reusable = True
        """False once the server said ``Connection: close``."""

    def eof_received(self) -> bool | None:
        self._lost("the server closed the connection before the answer ended")
        return None  # the transport closes itself

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        waiter = self.waiter
        if waiter is None or waiter.done():
            return  # bytes nobody asked for: kept, so the connection is not lent again
        try:
            answer = self._parse()
        except (BadAnswer, ValueError) as exc:
            waiter.set_exception(exc if isinstance(exc, BadAnswer) else BadAnswer(str(exc)))
            return
        if answer is not None:
            self.waiter = None
            waiter.set_result(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost("the connection closed before the answer ended")

    def _lost(self, why: str) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(BadAnswer(why))

    def usable(self) -> bool:
        """Open, and nothing in it but what the next request's answer will bring."""
        transport = self.transport
        return (
            self.reusable
            and not self.buffer
            and not self.closed
            and transport is not None
            and not transport.is_closing()
        )

    def send(self, request: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None and self.waiter is None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _parse(self) -> Answer | None:
        """The first whole answer in the buffer (removed from it), or None while it is not."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        try:
            head = parse_head(self.buffer[:end])
        except ValueError as exc:
            raise BadAnswer(str(exc)) from None
        start, headers = end + 4, head.headers
        if "content-length" in headers:
            length = int(headers["content-length"])
            if length < 0:
                raise BadAnswer(f"a negative Content-Length: {length}")
            stop = start + length
            if len(self.buffer) < stop:
                return None
            body = bytes(self.buffer[start:stop])
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            framed = _chunked(self.buffer, start)
            if framed is None:
                return None
            body, stop = framed
        else:
            raise BadAnswer("an answer without Content-Length or chunked framing")
        del self.buffer[:stop]
        if headers.get("connection", "").lower() == "close":
            self.reusable = False
        return Answer(head.status, body)


def _chunked(buffer: bytearray, at: int) -> tuple[bytes, int] | None:
    """A chunked body starting at ``at``: its bytes and where the answer ends, or None while it
    is not all there (trailers are not expected and not allowed)."""
    chunks: list[bytes] = []
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        size = int(bytes(buffer[at:line_end]).split(b";", 1)[0], 16)
        if size < 0:
            raise BadAnswer(f"a negative chunk size: {size}")
        at = line_end + 2
        if size == 0:
            if len(buffer) < at + 2:
                return None
            if buffer[at : at + 2] != b"\r\n":
                raise BadAnswer("trailers after a chunked body")
            return b"".join(chunks), at + 2
        if len(buffer) < at + size + 2:
            return None
        if buffer[at + size : at + size + 2] != b"\r\n":
            raise BadAnswer("a chunk not followed by CRLF")
        chunks.append(bytes(buffer[at : at + size]))
        at += size + 2


class RawClient:
    """Requests to one server over at most ``limit`` keep-alive connections, each answered within
    ``timeout`` seconds (the connection's opening included)."""

    def __init__(self, base: str, limit: int, timeout: float = TIMEOUT_S) -> None:
        url = urlsplit(base)
        if url.scheme != "http" or url.hostname is None:
            raise ValueError(f"only http://host:port bases: {base!r}")
        self._host, self._port = url.hostname, url.port or 80
        self._host_header = f"{self._host}:{self._port}"
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._free = asyncio.Semaphore(limit)
        self._timeout = timeout
        self._closed = False

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Answer:
        head = [f"{method} {path} HTTP/1.1", f"Host: {self._host_header}"]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body)}")
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        async with self._free:
            if self._closed:
                raise RuntimeError("the client is closed")
            connection: _Connection | None = None
            try:
                async with asyncio.timeout(self._timeout):
                    connection = await self._connection()
                    answer = await connection.send(request)
            except BaseException:
                if connection is not None:
                    connection.close()
                    self._all.discard(connection)
                raise
            if connection.usable() and not self._closed:
                self._idle.append(connection)
            else:
                connection.close()
                self._all.discard(connection)
            return answer

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable():
                return connection
            connection.close()
            self._all.discard(connection)
        _, connection = await asyncio.get_running_loop().create_connection(
            _Connection, self._host, self._port
        )
        if self._closed:  # closed while this one was opening
            connection.close()
            raise RuntimeError("the client is closed")
        self._all.add(connection)
        return connection

    def close(self) -> None:
        """Close every connection; a request after this raises."""
        self._closed = True
        for connection in self._all:
            connection.close()
        self._all.clear()
        self._idle.clear()


class Requests(Protocol):
    """What the request load needs of a client: one request, its status and body."""

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Answer: ...


class AiohttpRequests:
    """The same requests through aiohttp's client, as the bench sent them before the lean one
    (``TETHER_BENCH_CLIENT=aiohttp``): to measure what the client costs."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self._http = http
        self._base = base

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Answer:
        url = f"{self._base}{path}"
        async with self._http.request(method, url, data=body or None, headers=headers) as r:
            return Answer(r.status, await r.read())


@contextlib.asynccontextmanager
async def request_client(base: str, limit: int) -> AsyncIterator[Requests]:
    """The request load's client for ``base``, ``limit`` requests at a time: the lean one, or
    aiohttp's where :data:`CLIENT_ENV` says ``aiohttp``."""
    if os.environ.get(CLIENT_ENV, "").strip().lower() == "aiohttp":
        async with session(limit) as http:
            yield AiohttpRequests(http, base)
        return
    client = RawClient(base, limit)
    try:
        yield client
    finally:
        client.close()
