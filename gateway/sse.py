"""Server-sent events: replay from the store after a cursor, then tail pub/sub, no gap, no dup.

The reader subscribes before it reads the store, so an event committed meanwhile arrives by one
path or the other; cursors it has already sent are dropped. When pub/sub may have lost messages
(a gap in cursors, a RESYNC, or a quiet ping interval) it re-reads the store.

Memory per stream is bounded by ``limits.stream_buffer_bytes`` (B), and nothing is ever lost,
because every event is in the store before anyone is told about it:

- pub/sub messages the stream has not taken yet: at most B; past it the subscription drops them
  for one RESYNC (``tether.pubsub.Subscription``), and the stream re-reads the store instead;
- a replay page: from the store, as many events as fit B at the largest frame seen so far (the
  first page, before any frame was seen, holds few events); before them, events the process keeps
  for all its streams (``tether.gateway.replay_cache``, its own budget), as many as their frames
  fit B;
- what is written: chunks of at most B (or one larger frame), each awaited until the socket
  took it (aiohttp waits for the transport to drain past 64 KiB).

So a slow reader is fed from the store at its own pace, not from memory. A reader that cannot
take one chunk within ``timers.stream_send_timeout`` is too far behind: its stream is closed
(logged at INFO with the invocation id) and the client reconnects with ``after=N``, losing
nothing. A client that hangs up ends its stream when its connection closes
(:mod:`tether.gateway.hangups`), not at the stream's next write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import HttpVersion11, web

from tether.channels import events_channel
from tether.errors import ErrorCode
from tether.events import Event, decode_batch
from tether.gateway.frames import frame
from tether.gateway.hangups import hangup_closes
from tether.gateway.keys import METRICS, SERVICES, SETTINGS, STREAM_READS, STREAMS
from tether.gateway.replay_cache import Replay, Wanted
from tether.gateway.responses import ApiError
from tether.gateway.stream_reads import StreamReads
from tether.pubsub import CLOSING, RESYNC, OpenStreams, Published, PubSub, Subscription
from tether.settings import Settings
from tether.store.errors import StoreError

log = logging.getLogger(__name__)

REPLAY_PAGE = 1000
FIRST_PAGE = 16
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache, no-transform",  # no proxy may buffer or compress a stream
    "X-Accel-Buffering": "no",
}
"""No ``Connection`` header: aiohttp says ``close`` when the connection will not be kept."""


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


@dataclass(frozen=True, slots=True)
class SharedChunk:
    """The frames of one published batch, built once per gateway process and written as the same
    bytes to every stream of the invocation that is in step with it."""

    first: int
    last: int
    ends: bool
    largest: int
    data: bytes


def shared_chunk(batch: list[Event]) -> SharedChunk | None:
    """The batch's frames in one chunk; None when it has no events, or events after a terminal
    one (never written: such a batch takes the per-event path, which stops at the terminal)."""
    if not batch or any(e.is_terminal for e in batch[:-1]):
        return None
    frames = [frame(e) for e in batch]
    return SharedChunk(
        batch[0].cursor,
        batch[-1].cursor,
        batch[-1].is_terminal,
        max(len(f) for f in frames),
        b"".join(frames),
    )


@dataclass
class EventStream:
    """One client's stream of one invocation's events."""

    reads: StreamReads
    pubsub: PubSub
    invocation_id: str
    sink: FrameSink
    limits: StreamLimits
    last_sent: int = 0
    done: bool = False
    encode: Callable[[Event], bytes] = frame
    """Frames of one event (none: b""); the agents routes translate events here."""
    transport: asyncio.WriteTransport | None = None
    """The socket under ``sink``, when known: a write it can take at once needs no timer."""
    seq: int | None = None
    """The row this stream follows, once known (given, or its first read's): a read that finds
    another row under the id (retention deleted this one) ends the stream."""
    owner: str | None = None
    """The owner the caller will check the first read against, if any."""
    largest_frame: int = field(default=0, init=False)

    async def run(self, open_streams: OpenStreams) -> None:
        """Open and follow the stream, whoever owns the invocation (the caller checked)."""
        async with self.opened() as (sub, first):
            if first is not None:
                await self.follow(sub, first, open_streams)

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[tuple[Subscription | None, Replay | None]]:
        """Subscribed, then the first read: the invocation's owner, status, last cursor and first
        page, all from one statement (None: no such invocation). A finished log this process
        keeps needs neither: nothing will be published on it (no subscription, None)."""
        finished = self.reads.kept.trusted(self._wanted())
        if finished is not None:
            self.seq = finished.page.seq
            yield None, finished
            return
        async with self.pubsub.subscribe(events_channel(self.invocation_id)) as sub:
            yield sub, await self._read()

    async def follow(
        self, sub: Subscription | None, first: Replay, open_streams: OpenStreams
    ) -> None:
        """Send ``first`` and what follows it, until the terminal event or the process closes."""
        if sub is None:  # a finished log: ``first`` holds all of it
            await self._catch_up(first)
            return
        open_streams.add(sub)
        try:
            await self._catch_up(first)
            while not self.done:
                if not await self._next(sub):
                    if not self._hung_up():
                        await self._write(b": server shutting down, reconnect\n\n")
                    return
        finally:
            open_streams.discard(sub)

    def _hung_up(self) -> bool:
        """The client is gone (nobody to tell anything)."""
        return self.transport is not None and self.transport.is_closing()

    async def _next(self, sub: Subscription) -> bool:
        message = await sub.get(timeout=self.limits.ping_interval)
        if message is CLOSING:
            return False
        if message is None:
            await self._write(b": ping\n\n")
            await self._catch_up(await self._read())  # a quiet stream re-checks the truth
        elif message is RESYNC:
            await self._catch_up(await self._read())
        elif isinstance(message, str):
            await self._deliver(message)
        return True

    async def _deliver(self, message: str) -> None:
        if isinstance(message, Published) and self.encode is frame:
            chunk = message.derived(shared_chunk)
            fits = chunk is not None and len(chunk.data) <= self.limits.buffer_bytes
            if chunk is not None and fits and chunk.first == self.last_sent + 1:
                self.largest_frame = max(self.largest_frame, chunk.largest)
                self.last_sent, self.done = chunk.last, chunk.ends
                await self._write(chunk.data)
                return
        batch = message.events() if isinstance(message, Published) else decode_batch(message)
        if batch and batch[0].cursor > self.last_sent + 1:
            await self._catch_up(await self._read())  # missed something: the store has it
        else:
            await self._send(batch)

    async def _read(self) -> Replay | None:
        replay = await self.reads.read(self._wanted())
        if replay is not None and self.seq is not None and replay.page.seq != self.seq:
            return None  # another row under the id: this one was deleted
        if replay is not None:
            self.seq = replay.page.seq
        return replay

    async def _catch_up(self, replay: Replay | None) -> None:
        """Send ``replay`` and read on until every stored event is sent; a stream whose run ended
        (and was sent), or whose invocation is gone, is over."""
        while not self.done:
            if replay is None:  # deleted by retention
                self.done = True
                return
            page = replay.page
            await self._send(page.events, replay.frames)
            if page.ends_stream(self.last_sent):
                self.done = True
            if self.done or not page.events or not page.has_more(self.last_sent):
                return
            replay = await self._read()

    def _wanted(self) -> Wanted:
        """The next read: after what was sent, a page's worth, naming the row as far as known."""
        size = self._page_size()
        bound = self.limits.buffer_bytes
        return Wanted(self.invocation_id, self.last_sent, size, bound, self.seq, self.owner)

    def _page_size(self) -> int:
        largest = self.largest_frame or self.limits.buffer_bytes // FIRST_PAGE
        return max(1, min(REPLAY_PAGE, self.limits.buffer_bytes // max(largest, 1)))

    async def _send(self, batch: list[Event], frames: list[bytes] | None = None) -> None:
        """Write ``batch`` (``frames``: their frames, when the read made them) in chunks."""
        chunk: list[bytes] = []
        size = 0
        framed = frames is not None and self.encode is frame
        for n, event in enumerate(batch):
            if self.done:
                break
            if event.cursor <= self.last_sent:  # sent already, or the reader's cursor is past
                self.done = event.is_terminal  # it: a run that ended there has nothing more
                continue
            data = frames[n] if framed and frames is not None else self.encode(event)
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
        transport = self.transport
        if transport is not None:
            _, high = transport.get_write_buffer_limits()
            if transport.get_write_buffer_size() + len(data) <= high:
                await self.sink.write(data)  # the socket does not pause: this cannot wait
                return
        try:
            async with asyncio.timeout(self.limits.send_timeout):
                await self.sink.write(data)
        except TimeoutError:
            raise ReaderTooSlow(self.invocation_id) from None


class EventStreamResponse(web.StreamResponse):
    """A stream's response, which knows when its status line went out: the request's time to
    the first byte (``tether_http_request_seconds``)."""

    started_at: float | None = None


async def serve_stream(
    request: web.Request,
    invocation_id: str,
    after: int,
    encode: Callable[[Event], bytes] = frame,
    preamble: bytes = b"",
    *,
    owner: str | None = None,
    seq: int | None = None,
) -> web.StreamResponse:
    """Answer ``request`` with the SSE stream of ``invocation_id`` after cursor ``after``
    (``encode`` frames each event; ``preamble`` is written first). With ``owner``, an invocation
    that does not exist or is another owner's is a 404, told by the stream's first read; with
    ``seq``, the caller holds the row (it created or checked it), and a first read that finds
    none, or another, is a 404."""
    if owner is None and seq is None:
        raise TypeError("serve_stream needs the owner to check or the row's seq")
    services, metrics = request.app[SERVICES], request.app[METRICS]
    limits = StreamLimits.of(request.app[SETTINGS])
    response = EventStreamResponse(status=200, headers=SSE_HEADERS)
    if request.version < HttpVersion11:
        # HTTP/1.0 has no chunks: the stream's end is the connection's (aiohttp would keep a
        # kept-alive one open, so the client would wait on, and read the next answer as events).
        response.force_close()
    events = EventStream(
        request.app[STREAM_READS],
        services.pubsub,
        invocation_id,
        response,
        limits,
        after,
        encode=encode,
        seq=seq,
        owner=owner,
    )
    metrics.open_streams.inc()
    try:
        async with events.opened() as (sub, first):
            if first is None or (owner is not None and first.page.owner != owner):
                raise ApiError(ErrorCode.NOT_FOUND)
            await response.prepare(request)
            response.started_at = time.perf_counter()
            events.transport = request.transport
            ends = contextlib.nullcontext() if sub is None else hangup_closes(request, sub)
            with ends:
                if preamble:
                    await response.write(preamble)
                await events.follow(sub, first, request.app[STREAMS])
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
    except Exception as exc:
        if not response.prepared:
            raise  # nothing sent yet: the error middleware answers
        await interrupted(response, invocation_id, events.last_sent, exc)
    finally:
        metrics.open_streams.dec()
    return response


async def interrupted(
    response: web.StreamResponse, invocation_id: str, last_sent: int, exc: Exception
) -> None:
    """End a stream whose status line is out (a re-read failed, or a bug) as a stream ends:
    another response on the connection would corrupt it. The client reconnects with
    ``Last-Event-ID`` and gets what it missed."""
    if isinstance(exc, StoreError):  # its message is the store's own, never a value
        log.warning(
            "invocation %s: stream interrupted after cursor %d (%s)", invocation_id, last_sent, exc
        )
    else:
        log.exception("invocation %s: stream interrupted after cursor %d", invocation_id, last_sent)
    with contextlib.suppress(ConnectionResetError):
        await response.write(b": stream interrupted, reconnect\n\n")
        await response.write_eof()
