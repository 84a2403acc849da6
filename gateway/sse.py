"""Server-sent events: replay from the store after a cursor, then tail pub/sub, no gap, no dup.

The reader subscribes before it reads the store, so an event committed meanwhile arrives by one
path or the other; cursors it has already sent are dropped. When pub/sub may have lost messages
(a gap in cursors, a RESYNC, or a quiet ping interval) it re-reads the store.

Memory per stream is bounded by ``limits.stream_buffer_bytes`` (B), and nothing is ever lost,
because every event is in the store before anyone is told about it:

- pub/sub messages the stream has not taken yet: at most B; past it the subscription drops them
  for one RESYNC (``tether.pubsub.Subscription``), and the stream re-reads the store instead;
- a replay page: as many events as fit B at the largest frame seen so far (the first page,
  before any frame was seen, holds few events);
- what is written: chunks of at most B (or one larger frame), each awaited until the socket
  took it (aiohttp waits for the transport to drain past 64 KiB).

So a slow reader is fed from the store at its own pace, not from memory. A reader that cannot
take one chunk within ``timers.stream_send_timeout`` is too far behind: its stream is closed
(logged at INFO with the invocation id) and the client reconnects with ``after=N``, losing
nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from tether.channels import events_channel
from tether.events import Event, decode_batch
from tether.gateway.keys import METRICS, SERVICES, SETTINGS, STREAMS
from tether.pubsub import CLOSING, RESYNC, PubSub, Subscription
from tether.settings import Settings
from tether.store.store import Store

log = logging.getLogger(__name__)

REPLAY_PAGE = 1000
FIRST_PAGE = 16
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "Connection": "keep-alive",
}
# JSON leaves these raw inside strings, but line-splitting clients (str.splitlines, some
# JavaScript parsers) break lines on them: a payload could then forge an `id:` or `event:` line.
UNSAFE_IN_DATA = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def frame(event: Event) -> bytes:
    data = json.dumps(event.data, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in UNSAFE_IN_DATA.items():
        if char in data:
            data = data.replace(char, escaped)
    return f"id: {event.cursor}\nevent: {event.type}\ndata: {data}\n\n".encode()


class ReaderTooSlow(Exception):
    """The client did not take a chunk within the send timeout."""


class FrameSink(Protocol):
    """Where frames go: the prepared ``web.StreamResponse``."""

    async def write(self, data: bytes) -> None: ...


@dataclass(frozen=True)
class StreamLimits:
    ping_interval: float
    send_timeout: float
    buffer_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> StreamLimits:
        return cls(
            ping_interval=settings.timers.ping_interval,
            send_timeout=settings.timers.stream_send_timeout,
            buffer_bytes=settings.limits.stream_buffer_bytes,
        )


@dataclass
class EventStream:
    """One client's stream of one invocation's events."""

    store: Store
    pubsub: PubSub
    invocation_id: str
    sink: FrameSink
    limits: StreamLimits
    last_sent: int = 0
    done: bool = False
    encode: Callable[[Event], bytes] = frame
    """Frames of one event (none: b""); the agents routes translate events here."""
    largest_frame: int = field(default=0, init=False)

    async def run(self, open_streams: set[Subscription]) -> None:
        async with self.pubsub.subscribe(events_channel(self.invocation_id)) as sub:
            open_streams.add(sub)
            try:
                await self._replay()
                await self._check_finished()
                while not self.done:
                    if not await self._next(sub):
                        await self._write(b": server shutting down, reconnect\n\n")
                        return
            finally:
                open_streams.discard(sub)

    async def _next(self, sub: Subscription) -> bool:
        message = await sub.get(timeout=self.limits.ping_interval)
        if message is CLOSING:
            return False
        if message is None:
            await self._write(b": ping\n\n")
            await self._replay()  # a quiet stream re-checks the truth
            await self._check_finished()
        elif message is RESYNC:
            await self._replay()
        elif isinstance(message, str):
            batch = decode_batch(message)
            if batch and batch[0].cursor > self.last_sent + 1:
                await self._replay()  # missed something: the store has it
            else:
                await self._send(batch)
        return True

    async def _check_finished(self) -> None:
        """A client already past the terminal event (or a deleted run) gets an empty stream."""
        if self.done:
            return
        invocation = await self.store.get(self.invocation_id)
        if invocation is None or (
            invocation.status.is_terminal and self.last_sent >= invocation.last_event_id
        ):
            self.done = True

    async def _replay(self) -> None:
        while not self.done:
            limit = self._page_size()
            batch = await self.store.events_after(self.invocation_id, self.last_sent, limit)
            await self._send(batch)
            if len(batch) < limit:
                return

    def _page_size(self) -> int:
        largest = self.largest_frame or self.limits.buffer_bytes // FIRST_PAGE
        return max(1, min(REPLAY_PAGE, self.limits.buffer_bytes // max(largest, 1)))

    async def _send(self, batch: list[Event]) -> None:
        chunk: list[bytes] = []
        size = 0
        for event in batch:
            if event.cursor <= self.last_sent or self.done:
                continue
            data = self.encode(event)
            self.largest_frame = max(self.largest_frame, len(data))
            if chunk and size + len(data) > self.limits.buffer_bytes:
                await self._write(b"".join(chunk))
                chunk, size = [], 0
            chunk.append(data)
            size += len(data)
            self.last_sent = event.cursor
            self.done = event.is_terminal
        if chunk:
            await self._write(b"".join(chunk))

    async def _write(self, data: bytes) -> None:
        try:
            async with asyncio.timeout(self.limits.send_timeout):
                await self.sink.write(data)
        except TimeoutError:
            raise ReaderTooSlow(self.invocation_id) from None


async def serve_stream(
    request: web.Request,
    invocation_id: str,
    after: int,
    encode: Callable[[Event], bytes] = frame,
    preamble: bytes = b"",
) -> web.StreamResponse:
    """Answer ``request`` with the SSE stream of ``invocation_id`` after cursor ``after``
    (``encode`` frames each event; ``preamble`` is written first)."""
    response = web.StreamResponse(status=200, headers=SSE_HEADERS)
    await response.prepare(request)
    if preamble:
        await response.write(preamble)
    services, metrics = request.app[SERVICES], request.app[METRICS]
    limits = StreamLimits.of(request.app[SETTINGS])
    events = EventStream(
        services.store, services.pubsub, invocation_id, response, limits, after, encode=encode
    )
    metrics.open_streams.inc()
    try:
        await events.run(request.app[STREAMS])
    except ReaderTooSlow:
        log.info(
            "invocation %s: stream reader too far behind (sent up to cursor %d); closing it",
            invocation_id,
            events.last_sent,
        )
        metrics.slow_readers_closed.inc()
        if request.transport is not None:
            request.transport.abort()  # drop what it did not take; it reconnects with after=N
    except (ConnectionResetError, asyncio.CancelledError):
        pass  # the client went away
    finally:
        metrics.open_streams.dec()
    return response
