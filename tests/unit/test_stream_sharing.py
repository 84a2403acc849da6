"""What one gateway process makes once for all its streams: a published message's events and
frames, and the rows and frames of reads that go together."""

from __future__ import annotations

from pathlib import Path

from tether.events import Event, encode_batch
from tether.gateway.frames import frame
from tether.gateway.replay_cache import Wanted
from tether.gateway.sse import SharedChunk, shared_chunk
from tether.gateway.stream_reads import StreamReads
from tether.pubsub import MemoryPubSub, Published
from tether.store.schema import NewInvocation
from tether.store.store import AppendRequest, NewEvent, Store, StreamRead


async def test_every_subscriber_of_a_channel_gets_the_same_message_decoded_once() -> None:
    pubsub = MemoryPubSub()
    batch = [Event(1, "tick", {"i": 1}), Event(2, "run.completed", {"output": None})]
    async with pubsub.subscribe("c") as a, pubsub.subscribe("c") as b:
        await pubsub.publish("c", [encode_batch(batch)])
        first, second = await a.get(1), await b.get(1)
    assert isinstance(first, Published) and first is second
    assert first.events() == batch and first.events() is second.events()
    made: list[list[Event]] = []

    def chunk(events: list[Event]) -> SharedChunk | None:
        made.append(events)
        return shared_chunk(events)

    assert first.derived(chunk) is second.derived(chunk) and len(made) == 1


def test_a_shared_chunk_is_the_frames_of_its_batch_and_ends_at_a_terminal_event() -> None:
    batch = [Event(4, "tick", {"i": 1}), Event(5, "run.completed", {"output": 1})]
    chunk = shared_chunk(batch)
    assert chunk is not None
    assert chunk.data == frame(batch[0]) + frame(batch[1])
    assert (chunk.first, chunk.last, chunk.ends) == (4, 5, True)
    assert chunk.largest == max(len(frame(e)) for e in batch)
    assert shared_chunk([]) is None
    assert shared_chunk([Event(1, "run.completed", {}), Event(2, "tick", {})]) is None


async def test_reads_of_one_invocation_in_one_batch_share_its_events_and_frames(
    tmp_path: Path,
) -> None:
    store = Store.embedded(str(tmp_path / "s.db"))
    await store.migrate()
    try:
        new = NewInvocation("8c6a1f3e-0000-4000-8000-000000000001", "ann", None, 1, "h")
        await store.accept(new)
        claim = await store.claim(new.id, "w")
        assert claim is not None
        ticks = [NewEvent("tick", {"type": "tick", "i": i}) for i in range(10)]
        await store.append(AppendRequest(new.id, claim.attempt, ticks))
        early, late = await store.read_streams([StreamRead(new.id, 0, 6), StreamRead(new.id, 3, 6)])
        assert early is not None and late is not None
        assert [e.cursor for e in early.events] == [1, 2, 3, 4, 5, 6]
        assert [e.cursor for e in late.events] == [4, 5, 6, 7, 8, 9]
        assert early.events[3] is late.events[0]  # one row, one decoded event
        reads = StreamReads(store)
        one, two = await reads.read(Wanted(new.id, 0, 6)), await reads.read(Wanted(new.id, 3, 6))
        assert one is not None and two is not None
        assert one.frames == [frame(e) for e in one.page.events]
        assert all(a is b for a, b in zip(one.frames[3:], two.frames, strict=False))  # framed once
    finally:
        await store.close()
