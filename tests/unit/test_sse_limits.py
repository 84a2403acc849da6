"""A stream holds a bounded amount of memory for a reader that falls behind, and loses nothing.

In process, on the embedded services: the subscription's bound, the writer's chunks and replay
pages, the send timeout, and a real socket that stops reading.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.client import SseEvent, assert_clean_log, read_sse
from tests.inprocess import served
from tests.rawhttp import RawConnection, complete_events, dechunk, request
from tests.unit.test_gateway_embedded import ClientFactory, client_for
from tether import AgentApp, InvocationContext
from tether.gateway.keys import SERVICES, STREAMS
from tether.gateway.sse import EventStream, ReaderTooSlow, StreamLimits
from tether.gateway.stream_reads import StreamReads
from tether.pubsub import CLOSING, RESYNC, OpenStreams, Subscription
from tether.services import Services
from tether.store.schema import Status
from tether.store.store import StreamRead

BOUND = 16 * 1024
PAD = 1000


async def eventually(
    predicate: Callable[[], Awaitable[bool]], what: str, within: float = 20
) -> None:
    """Wait for ``predicate`` to hold, for ``within`` seconds at most."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_a_subscription_that_falls_behind_keeps_one_resync_instead_of_the_backlog() -> None:
    sub = Subscription("c", max_pending_bytes=BOUND)
    for i in range(1000):
        sub.put("x" * 500 + str(i))
        assert sub.pending_bytes <= BOUND
    assert sub.overflows > 0
    sub.put("newest")
    received = []
    while (message := await sub.get(0)) is not None:
        received.append(message)
    assert received[0] is RESYNC and received[-1] == "newest"
    assert all(isinstance(m, str) for m in received[1:])
    assert len(received) < 1000 // 10


async def test_a_subscription_hands_out_resync_then_newer_messages_in_order() -> None:
    sub = Subscription("c", max_pending_bytes=BOUND)
    sub.put("old")
    sub.put("y" * (2 * BOUND))  # one message past the bound on its own
    sub.put("new")
    assert [await sub.get(0.1), await sub.get(0.1), await sub.get(0.01)] == [RESYNC, "new", None]
    assert sub.pending_bytes == 0


async def test_closing_comes_before_pending_messages_and_stays() -> None:
    sub = Subscription("c")
    sub.put("a")
    sub.put(CLOSING)
    sub.put(RESYNC)
    assert await sub.get(0.1) is CLOSING
    assert await sub.get(0.1) is CLOSING


class Sink:
    """A reader: records every chunk; while ``reading`` is clear, a write waits for it."""

    def __init__(self, reading: bool = True) -> None:
        self.chunks: list[bytes] = []
        self.reading = asyncio.Event()
        self.blocked = asyncio.Event()
        if reading:
            self.reading.set()

    async def write(self, data: bytes) -> None:
        if not self.reading.is_set():
            self.blocked.set()
            await self.reading.wait()
        self.chunks.append(data)

    def events(self) -> list[SseEvent]:
        return complete_events(b"".join(self.chunks).decode())


def gated_app(gate: asyncio.Event) -> AgentApp:
    app = AgentApp(name="gated")

    @app.invoke
    async def run(input: Any, ctx: InvocationContext) -> Any:
        for i in range(input["before"]):
            await ctx.emit({"type": "tick", "i": i, "pad": "x" * PAD})
        await gate.wait()
        for i in range(input["after"]):
            await ctx.emit({"type": "tock", "i": i, "pad": "x" * PAD})
        return "done"

    return app


def limits(send_timeout: float = 60) -> StreamLimits:
    return StreamLimits(ping_interval=15, send_timeout=send_timeout, buffer_bytes=BOUND)


async def start(client: Any, input: Any) -> str:
    invocation_id = str(uuid.uuid4())
    body = {"id": invocation_id, "input": input, "background": True}
    async with client.post("/api/invocations", json=body) as r:
        assert r.status == 202
    return invocation_id


async def finished(services: Services, invocation_id: str) -> None:
    async def done() -> bool:
        invocation = await services.store.get(invocation_id)
        return invocation is not None and invocation.status is Status.COMPLETED

    await eventually(done, f"{invocation_id} completed")


async def test_a_stalled_reader_holds_a_bounded_backlog_then_gets_every_event_once(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    gate = asyncio.Event()
    client = await client_for(
        aiohttp_client, tmp_path, app=gated_app(gate), limits={"stream_buffer_bytes": BOUND}
    )
    services = client.app[SERVICES]
    invocation_id = await start(client, {"before": 3, "after": 300})
    sink, subs = Sink(reading=False), OpenStreams()
    stream = EventStream(
        StreamReads(services.store), services.pubsub, invocation_id, sink, limits()
    )
    task = asyncio.create_task(stream.run(subs))
    async with asyncio.timeout(20):
        await sink.blocked.wait()
    (sub,) = subs
    gate.set()  # 300 KB of events for a reader that reads nothing
    await finished(services, invocation_id)
    assert sub.pending_bytes <= BOUND and sub.overflows > 0
    sink.reading.set()
    async with asyncio.timeout(20):
        await task
    events = sink.events()
    assert_clean_log(events)
    assert len(events) == 1 + 3 + 300 + 1
    largest = max(len(c) for c in b"".join(sink.chunks).split(b"\n\n"))
    assert max(len(c) for c in sink.chunks) <= max(BOUND, largest + 2)


async def test_replay_pages_and_chunks_are_sized_to_the_buffer(
    aiohttp_client: ClientFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await client_for(aiohttp_client, tmp_path)
    services = client.app[SERVICES]
    invocation_id = await start(client, {"emit": 100, "pad": 2000})
    await finished(services, invocation_id)
    pages: list[int] = []
    read_streams = services.store.read_streams

    async def recording(reads: Sequence[StreamRead]) -> Any:
        pages.extend(read.limit for read in reads)
        return await read_streams(reads)

    monkeypatch.setattr(services.store, "read_streams", recording)
    sink = Sink()
    await EventStream(
        StreamReads(services.store), services.pubsub, invocation_id, sink, limits()
    ).run(OpenStreams())
    assert_clean_log(sink.events())
    frame_size = max(len(c) for c in b"".join(sink.chunks).split(b"\n\n"))
    assert pages[0] <= 16 and all(p <= BOUND // frame_size for p in pages[1:]), pages
    assert max(len(c) for c in sink.chunks) <= BOUND


async def test_a_reader_that_takes_nothing_within_the_send_timeout_is_too_slow(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await client_for(aiohttp_client, tmp_path)
    services = client.app[SERVICES]
    invocation_id = await start(client, {"emit": 3})
    await finished(services, invocation_id)
    stalled = Sink(reading=False)
    reads = StreamReads(services.store)
    stream = EventStream(reads, services.pubsub, invocation_id, stalled, limits(send_timeout=0.2))
    with pytest.raises(ReaderTooSlow):
        async with asyncio.timeout(20):
            await stream.run(OpenStreams())


async def test_a_socket_that_stops_reading_is_closed_and_resumes_with_after_losing_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    buffer = 64 * 1024
    tight = {"stream_send_timeout": 0.5}
    async with (
        served(tmp_path, limits={"stream_buffer_bytes": buffer}, timers=tight) as server,
        aiohttp.ClientSession(server.base) as client,
    ):
        invocation_id = await start(client, {"emit": 600, "pad": 8000, "emit_sleep": 0.001})
        reader = await RawConnection.open(server.base, recv_buffer=4096)
        await reader.send(request("GET", f"/api/invocations/{invocation_id}/events"))
        assert (await reader.read_head()).status == 200
        peak = {"pending": 0, "transport": 0}

        async def closed_as_too_slow() -> bool:
            pending = [sub.pending_bytes for sub in server.app[STREAMS]]
            peak["pending"] = max([peak["pending"], *pending])
            peak["transport"] = max([peak["transport"], *server.write_buffers()])
            return any(
                r.name == "tether.gateway.sse" and invocation_id in r.getMessage()
                for r in caplog.records
            )

        await eventually(closed_as_too_slow, "the slow reader to be closed")
        body = await reader.read_to_end()
        reader.close()
        first = complete_events(dechunk(body).decode(errors="replace"))
        assert first and first[-1].type != "run.completed"
        after = {"after": str(first[-1].id)}
        async with client.get(f"/api/invocations/{invocation_id}/events", params=after) as r:
            rest = await read_sse(r)
    assert peak["pending"] <= buffer
    assert peak["transport"] <= 2 * buffer + 128 * 1024, peak  # never the 4.8 MB stream
    assert_clean_log(first + rest)
    assert len(first + rest) == 602
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_a_wait_ends_at_its_own_timeout_whatever_earlier_waits_asked() -> None:
    sub = Subscription("c")
    loop = asyncio.get_running_loop()
    loop.call_soon(sub.put, "first")
    assert await sub.get(3600) == "first"  # left a timer an hour away
    assert await sub.get(0.01) is None  # an earlier deadline than that timer's
    loop.call_soon(sub.put, "second")
    assert await sub.get(0.01) == "second"
    assert await sub.get(0) is None and await sub.get(0.02) is None
    loop.call_soon(sub.put, CLOSING)
    assert await sub.get() is CLOSING
