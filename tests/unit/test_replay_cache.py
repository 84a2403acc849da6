"""What a gateway process keeps of the logs its streams read (``tether.gateway.replay_cache``):
reads ask the store only for what is not kept, say exactly what the store says, stay within
their budget, and never show one row's events for another row that reuses its id."""

from __future__ import annotations

import asyncio
import random
import tracemalloc
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.client import read_sse
from tests.unit.test_gateway_embedded import ClientFactory, client_for
from tether.channels import events_channel
from tether.events import Event
from tether.gateway import replay_cache
from tether.gateway.frames import frame
from tether.gateway.keys import SERVICES
from tether.gateway.replay_cache import TRUSTED_FOR, Replay, ReplayCache, Wanted
from tether.gateway.sse import EventStream, StreamLimits
from tether.gateway.stream_reads import StreamReads
from tether.jsonvalue import dumps, loads
from tether.outcomes import completed
from tether.pubsub import MemoryPubSub, OpenStreams
from tether.status import Status
from tether.store.schema import NewInvocation
from tether.store.store import (
    AppendRequest,
    FinishRequest,
    NewEvent,
    Store,
    StreamPage,
    StreamRead,
)

ID = "8c6a1f3e-0000-4000-8000-00000000000a"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def emitted(store: Store, owner: str, count: int, *, finish: bool) -> None:
    """Invocation ``ID`` of ``owner``: ``run.started``, ``count`` ticks, then (``finish``)
    ``run.completed``."""
    await store.accept(NewInvocation(ID, owner, None, 1, "h"))
    claim = await store.claim(ID, "w")
    assert claim is not None
    ticks = [NewEvent("tick", {"owner": owner, "i": i}) for i in range(count)]
    await store.append(AppendRequest(ID, claim.attempt, ticks))
    if finish:
        await store.finish(FinishRequest(ID, 1, completed({"owner": owner}), []))


def recorded(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[StreamRead]:
    """Every read that reaches the store, from now on (patch before building StreamReads)."""
    asked: list[StreamRead] = []
    read_streams = store.read_streams

    async def recording(reads: Sequence[StreamRead]) -> Any:
        asked.extend(reads)
        return await read_streams(reads)

    monkeypatch.setattr(store, "read_streams", recording)
    return asked


def reads_with(store: Store, clock: Clock, budget: int = 1 << 20) -> StreamReads:
    reads = StreamReads(store)
    reads.kept = ReplayCache(budget, clock=clock)
    return reads


async def truth(store: Store, after: int, limit: int = 10_000) -> list[Event]:
    return await store.events_after(ID, after, limit)


def assert_same(replay: Replay | None, events: list[Event]) -> None:
    assert replay is not None
    assert replay.page.events == events
    assert replay.frames == [frame(e) for e in events]


def assert_sound(cache: ReplayCache) -> None:
    """Every kept run is consecutive cursors with a frame each, and the sizes add up."""
    total = 0
    for log in cache._logs.values():
        assert len(log.events) == len(log.frames) > 0
        assert [e.cursor for e in log.events] == list(range(log.first, log.end + 1))
        assert log.frames == [frame(e) for e in log.events]
        assert log.size == sum(replay_cache.cost(f) for f in log.frames)
        total += log.size
    assert cache.size == total


def page(
    owner: str, first: int, count: int, status: Status = Status.ACTIVE, seq: int = 1
) -> StreamPage:
    events = [Event(first + k, "tick", {"pad": "x" * 50}) for k in range(count)]
    return StreamPage(owner, status, first + count - 1, seq, events)


async def test_a_reconnect_asks_the_store_only_for_the_events_not_kept(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await emitted(store, "ann", 30, finish=False)  # cursors 1..31, still running
    asked = recorded(store, monkeypatch)
    reads = reads_with(store, Clock())
    assert_same(await reads.read(Wanted(ID, 0, 10)), await truth(store, 0, 10))
    assert asked == [StreamRead(ID, 0, 10)]
    # 6..10 are kept: the store gives 11..15 and the facts
    got = await reads.read(Wanted(ID, 5, 10))
    assert asked[1:] == [StreamRead(ID, 10, 5)]
    assert_same(got, await truth(store, 5, 10))
    assert got is not None and got.page.status is Status.ACTIVE and got.page.last_event_id == 31
    got = await reads.read(Wanted(ID, 2, 4, owner="ann"))  # all kept, running: facts read
    assert asked[2:] == [StreamRead(ID, 6, 0)]
    assert_same(got, await truth(store, 2, 4))
    assert got is not None and got.page.has_more(6)


async def test_a_finished_log_is_replayed_without_the_store_to_a_reader_naming_its_row(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await emitted(store, "ann", 20, finish=True)  # cursors 1..22, run.completed last
    asked = recorded(store, monkeypatch)
    clock = Clock()
    reads = reads_with(store, clock)
    first = await reads.read(Wanted(ID, 0, 1000))
    assert_same(first, await truth(store, 0))
    assert first is not None
    seq = first.page.seq
    for after, limit in ((0, 16), (7, 1000), (21, 16), (22, 16)):
        got = await reads.read(Wanted(ID, after, limit, seq=seq))
        assert_same(got, await truth(store, after, limit))
        assert got is not None and got.page.owner == "ann" and got.page.last_event_id == 22
        assert got.page.ends_stream(22) and got.page.has_more(after) == (after < 22)
    assert_same(await reads.read(Wanted(ID, 7, 1000, owner="ann")), await truth(store, 7))
    assert len(asked) == 1
    await reads.read(Wanted(ID, 7, 1000, owner="bob"))  # names another row: the store answers
    await reads.read(Wanted(ID, 7, 1000, seq=seq + 1))
    await reads.read(Wanted(ID, 7, 1000))  # names none
    assert len(asked) == 4
    clock.now += TRUSTED_FOR + 0.01
    assert_same(await reads.read(Wanted(ID, 7, 1000, seq=seq)), await truth(store, 7))
    assert asked[4:] == [StreamRead(ID, 22, 985)]  # the facts, confirmed again
    await store.delete_expired(retention=-1)
    assert await reads.read(Wanted(ID, 7, 16, seq=seq)) is not None  # trusted for a second more
    clock.now += TRUSTED_FOR + 0.01
    assert await reads.read(Wanted(ID, 7, 16, seq=seq)) is None  # deleted: the store says so
    assert reads.kept.size == 0


async def test_an_id_reused_after_retention_never_shows_the_old_rows_events(store: Store) -> None:
    await emitted(store, "ann", 12, finish=True)
    clock = Clock()
    reads = reads_with(store, clock)
    old = await reads.read(Wanted(ID, 0, 1000))
    assert old is not None
    await store.delete_expired(retention=-1)
    await emitted(store, "bob", 40, finish=False)  # the same id, another row, another owner
    [new] = await store.read_streams([StreamRead(ID, 0, 0)])
    assert new is not None and new.seq > old.page.seq
    # within the second the old log is trusted: only a reader naming the old row gets it
    named: list[dict[str, Any]] = [{"seq": new.seq}, {"owner": "bob"}, {}]
    for who in named:
        got = await reads.read(Wanted(ID, 0, 1000, **who))
        assert got is not None and got.page.owner == "bob" and got.page.seq == new.seq
        assert_same(got, await truth(store, 0))
        reads.kept.forget(ID)
        reads.kept.remember(ID, old.page, clock.now)  # the old row kept and confirmed again
    clock.now += TRUSTED_FOR + 0.01
    for after, limit in ((3, 16), (0, 1000), (14, 5)):
        got = await reads.read(Wanted(ID, after, limit))
        assert got is not None and got.page.owner == "bob"
        assert_same(got, await truth(store, after, limit))
        assert all(e.data.get("owner") != "ann" for e in got.page.events if e.type == "tick")


def test_a_read_that_began_before_the_row_was_replaced_keeps_nothing_of_the_old_row() -> None:
    clock = Clock()
    cache = ReplayCache(1 << 20, clock=clock)
    done = page("bob", 1, 5, Status.COMPLETED, seq=2)
    cache.remember(ID, done, asked_at=clock.now)
    stale = page("ann", 1, 9, Status.COMPLETED, seq=1)
    assert cache.remember(ID, stale, asked_at=clock.now - 0.5) == [frame(e) for e in stale.events]
    assert cache.kept(Wanted(ID, 0, 100)) == (2, done.events, [frame(e) for e in done.events])
    earlier = page("bob", 1, 3, Status.ACTIVE, seq=2)  # the same row, read before it ended
    cache.remember(ID, earlier, asked_at=clock.now - 0.5)
    replay = cache.trusted(Wanted(ID, 0, 100, seq=2))  # the later read's facts stand
    assert replay is not None and replay.page.events == done.events
    clock.now += TRUSTED_FOR  # trust runs from when the confirming read began
    cache.remember(ID, done, asked_at=clock.now - TRUSTED_FOR + 0.001)
    clock.now += 0.01
    assert cache.trusted(Wanted(ID, 0, 100, seq=2)) is None
    assert_sound(cache)


async def test_any_order_of_reads_says_what_the_store_says(store: Store) -> None:
    await emitted(store, "ann", 60, finish=True)  # cursors 1..62
    whole = await truth(store, 0)
    clock = Clock()
    rng = random.Random(7)
    for budget in (1 << 20, 12_000, 0):  # ample, a few events' worth, nothing
        reads = reads_with(store, clock, budget)
        for _ in range(30):
            wanted = [(rng.randrange(0, 64), rng.randrange(1, 30)) for _ in range(6)]
            who: dict[str, Any] = rng.choice(({}, {"owner": "ann"}, {"owner": "bob"}))
            got = await asyncio.gather(*(reads.read(Wanted(ID, a, n, **who)) for a, n in wanted))
            for (after, limit), replay in zip(wanted, got, strict=True):
                assert_same(replay, whole[after : after + limit])
            paged = [await reads.read(Wanted(ID, a, n, page_bytes=300, **who)) for a, n in wanted]
            for (after, _), replay in zip(wanted, paged, strict=True):
                assert replay is not None and (replay.page.events or after >= 62)
                assert_same(replay, whole[after : after + len(replay.page.events)])
            assert reads.kept.size <= budget
            assert_sound(reads.kept)
            clock.now += rng.choice((0.0, 0.3, TRUSTED_FOR))


def test_kept_logs_stay_within_the_budget_the_least_recently_used_going_first() -> None:
    one = replay_cache.cost(frame(Event(10, "tick", {"pad": "x" * 50})))  # one event (10..99)
    cache = ReplayCache(40 * one, clock=Clock())
    for n in range(5):
        cache.remember(f"i{n}", page("ann", 10, 8), 0.0)
    assert cache.size == 40 * one
    cache.kept(Wanted("i0", 0, 100))  # looking does not count as use; a read's remember does
    cache.remember("i1", page("ann", 18, 1), 0.0)  # i1 now holds 9 events: i0 goes
    assert cache.size <= 40 * one and cache.kept(Wanted("i0", 0, 100)) is None
    assert cache.kept(Wanted("i1", 9, 100)) is not None
    cache.remember("big", page("ann", 10, 30), 0.0)  # one log keeps a quarter: its latest events
    kept = cache.kept(Wanted("big", 29, 100))
    assert kept is not None and [e.cursor for e in kept[1]] == list(range(30, 40))
    assert cache.kept(Wanted("big", 28, 100)) == (1, [], [])
    assert cache.size <= 40 * one
    assert_sound(cache)


def test_a_page_of_kept_events_is_bounded_by_count_or_by_the_bytes_of_its_frames() -> None:
    cache = ReplayCache(1 << 20, clock=Clock())
    cache.remember(ID, page("ann", 10, 20), 0.0)
    size = len(frame(Event(10, "tick", {"pad": "x" * 50})))
    for limit, page_bytes, count in ((5, None, 5), (5, 3 * size, 3), (1, 7 * size + 1, 7)):
        kept = cache.kept(Wanted(ID, 11, limit, page_bytes))
        assert kept is not None and [e.cursor for e in kept[1]] == list(range(12, 12 + count))
    kept = cache.kept(Wanted(ID, 11, 5, page_bytes=1))  # one frame larger than the bound: it alone
    assert kept is not None and len(kept[1]) == 1


class Sink:
    def __init__(self) -> None:
        self.data = b""

    async def write(self, data: bytes) -> None:
        self.data += data


async def test_a_stream_of_a_kept_finished_log_takes_no_subscription(store: Store) -> None:
    await emitted(store, "ann", 5, finish=True)
    reads = reads_with(store, Clock())
    first = await reads.read(Wanted(ID, 0, 1000))
    assert first is not None
    pubsub = MemoryPubSub()
    subscribed: list[str] = []
    subscribe = pubsub.subscribe

    def spying(channel: str) -> Any:
        subscribed.append(channel)
        return subscribe(channel)

    pubsub.subscribe = spying  # type: ignore[method-assign]
    limits = StreamLimits(ping_interval=5, send_timeout=5, buffer_bytes=64 * 1024)
    sink = Sink()
    await EventStream(reads, pubsub, ID, sink, limits, 2, seq=first.page.seq).run(OpenStreams())
    assert sink.data == b"".join(frame(e) for e in await truth(store, 2))
    assert subscribed == []
    await store.delete_expired(retention=-1)
    await emitted(store, "bob", 2, finish=False)
    sink = Sink()
    reads.kept.forget(ID)
    await EventStream(reads, pubsub, ID, sink, limits, seq=first.page.seq).run(OpenStreams())
    assert sink.data == b""  # the stream's row is gone; bob's is not its to send
    assert subscribed == [events_channel(ID)]


async def test_a_stream_posted_under_a_reused_id_gets_only_its_own_events(
    aiohttp_client: ClientFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replay_cache, "TRUSTED_FOR", 3600.0)  # the old log stays trusted
    client = await client_for(
        aiohttp_client, tmp_path, auth={"mode": "forwarded", "trusted_proxies": ["127.0.0.1/32"]}
    )
    services = client.app[SERVICES]
    alice, bob = {"X-Forwarded-User": "alice"}, {"X-Forwarded-User": "bob"}
    reused = str(uuid.uuid4())
    body = {"id": reused, "input": {"emit": 3}, "stream": True}
    async with client.post("/api/invocations", json=body, headers=alice) as r:
        assert r.status == 200 and len(await read_sse(r)) == 5
    async with client.get(f"/api/invocations/{reused}/events", headers=bob) as r:
        assert r.status == 404  # and the gateway now keeps alice's log, confirmed
    await services.store.delete_expired(retention=-1)
    body = {"id": reused, "input": {"emit": 1}, "stream": True}
    async with client.post("/api/invocations", json=body, headers=bob) as r:
        assert r.status == 200
        got = await read_sse(r)
    stored = await services.store.events_after(reused, 0)
    assert [(e.id, e.type, e.data) for e in got] == [(e.cursor, e.type, e.data) for e in stored]
    assert len(got) == 3


SHAPES = {
    "empty objects": [{} for _ in range(30_000)],
    "small objects": [{"id": i, "name": f"n{i}", "v": i * 1.5} for i in range(5_000)],
    "one-number lists": [[i] for i in range(1_000, 30_000)],
    "numbers": list(range(1_000, 40_000)),
    "floats": [i * 0.5 for i in range(30_000)],
    "text": "x" * 100_000,
    "other text": "漢字" * 30_000,
    "an agent's delta": "hello world ",
    "a number": 3,
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_kept_event_counts_at_least_the_memory_it_holds(shape: str) -> None:
    """The budget's estimate against ``tracemalloc``: the decoded JSON of many small values
    takes many times its text (the old four-times-the-frame rule counted a sixth of it)."""
    text = dumps({"type": "blob", "value": SHAPES[shape]})
    tracemalloc.start()
    try:
        event = Event(1, "blob", loads(text))
        data = frame(event)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert replay_cache.cost(data) >= held
    assert replay_cache.cost(data) <= 2.5 * held  # an estimate, not a guess far off
