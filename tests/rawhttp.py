"""A raw HTTP/1.1 connection on loopback, for what a well-behaved client never does: stop reading
a stream, upload nothing, hang up mid-upload. Every read has a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from tests.client import SseEvent


@dataclass(frozen=True)
class Head:
    status: int
    headers: dict[str, str]  # lower-case names


def parse_head(head: bytes | bytearray) -> Head:
    """A response's status line and headers (``head`` without its blank line)."""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Head(int(parts[1]), headers)


class RawConnection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.received = b""  # everything read past the head

    @classmethod
    async def open(cls, base: str, recv_buffer: int | None = None) -> RawConnection:
        """Connect to ``base``; a small ``recv_buffer`` makes a reader that stops reading stall
        the server after a few kilobytes instead of megabytes of kernel buffers."""
        url = urlsplit(base)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if recv_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (url.hostname, url.port))
        return cls(sock)

    async def send(self, data: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def read_head(self, timeout: float = 30) -> Head:  # noqa: ASYNC109
        loop = asyncio.get_running_loop()
        buffer = b""
        async with asyncio.timeout(timeout):
            while b"\r\n\r\n" not in buffer:
                data = await loop.sock_recv(self.sock, 65536)
                if not data:
                    raise ConnectionError(f"closed before the response head: {buffer!r}")
                buffer += data
        head, self.received = buffer.split(b"\r\n\r\n", 1)
        return parse_head(head)

    async def read_body(self, head: Head, timeout: float = 30) -> bytes:  # noqa: ASYNC109
        """The body of a response with a Content-Length (without waiting for the close)."""
        length = int(head.headers["content-length"])
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            while len(self.received) < length:
                data = await loop.sock_recv(self.sock, 65536)
                if not data:
                    raise ConnectionError("closed before the whole body")
                self.received += data
        return self.received[:length]

    async def read_to_end(self, timeout: float = 60) -> bytes:  # noqa: ASYNC109
        """Read until the server closes (or resets) the connection; the body so far."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            while True:
                try:
                    data = await loop.sock_recv(self.sock, 65536)
                except ConnectionResetError:
                    break
                if not data:
                    break
                self.received += data
        return self.received

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def request(method: str, path: str, headers: dict[str, str] | None = None) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: 127.0.0.1",
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def dechunk(body: bytes) -> bytes:
    """The payload of a chunked body, up to where it was cut off."""
    out = bytearray()
    while body:
        size_line, sep, rest = body.partition(b"\r\n")
        if not sep:
            break
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)


def complete_events(text: str) -> list[SseEvent]:
    """The events of an SSE body whose frames arrived whole (a cut-off last frame is dropped)."""
    events = []
    for block in text.split("\n\n")[:-1]:
        fields = dict(
            line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":")
        )
        if fields:
            events.append(SseEvent(int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return events
