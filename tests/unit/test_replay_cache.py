"""What a gateway process keeps of the logs its streams read (``tether.gateway.replay_cache``):
reads ask the store only for what is not kept, say exactly what the store says, stay within
their budget, and never show one row's events for another row that reuses its id."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tether.events import Event
from tether.gateway.frames import frame
from tether.gateway.replay_cache import TRUSTED_FOR, Replay, ReplayCache
from tether.gateway.sse import EventStream, StreamLimits
from tether.gateway.stream_reads import StreamReads
from tether.outcomes import completed
from tether.pubsub import MemoryPubSub
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


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = Store.embedded(str(tmp_path / "s.db"))
    await store.migrate()
    try:
        yield store
    finally:
        await store.close()


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
    """Every read that reaches the store, from now on."""
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


async def test_a_reconnect_asks_the_store_only_for_the_events_not_kept(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await emitted(store, "ann", 30, finish=False)  # cursors 1..31, still running
    asked = recorded(store, monkeypatch)
    reads = reads_with(store, Clock())
    assert_same(await reads.read(ID, 0, 10), await truth(store, 0, 10))
    assert asked == [StreamRead(ID, 0, 10)]
    got = await reads.read(ID, 5, 10)  # 6..10 are kept: the store gives 11..15 and the facts
    assert asked[1:] == [StreamRead(ID, 10, 5)]
    assert_same(got, await truth(store, 5, 10))
    assert got is not None and got.page.status is Status.ACTIVE and got.page.last_event_id == 31
    got = await reads.read(ID, 2, 4)  # all kept: the store is still asked for the facts
    assert asked[2:] == [StreamRead(ID, 15, 0)]
    assert_same(got, await truth(store, 2, 13))  # every kept event comes, past the limit too
    assert got is not None and got.page.has_more(15)


async def test_a_finished_log_is_replayed_without_the_store_until_its_trust_lapses(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await emitted(store, "ann", 20, finish=True)  # cursors 1..22, run.completed last
    asked = recorded(store, monkeypatch)
    clock = Clock()
    reads = reads_with(store, clock)
    assert_same(await reads.read(ID, 0, 1000), await truth(store, 0))
    for after in (0, 7, 21, 22):
        got = await reads.read(ID, after, 16)
        assert_same(got, await truth(store, after))
        assert got is not None and got.page.ends_stream(22) and got.page.owner == "ann"
    assert len(asked) == 1
    clock.now += TRUSTED_FOR + 0.01
    assert_same(await reads.read(ID, 7, 16), await truth(store, 7))
    assert asked[1:] == [StreamRead(ID, 22, 1)]  # the facts, confirmed again
    await store.delete_expired(retention=-1)
    assert await reads.read(ID, 7, 16) is not None  # trusted again for a second: kept
    clock.now += TRUSTED_FOR + 0.01
    assert await reads.read(ID, 7, 16) is None  # deleted: the store says so, nothing kept
    assert reads.kept.size == 0


async def test_an_id_reused_after_retention_never_shows_the_old_rows_events(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await emitted(store, "ann", 12, finish=True)
    clock = Clock()
    reads = reads_with(store, clock)
    assert_same(await reads.read(ID, 0, 1000), await truth(store, 0))
    await store.delete_expired(retention=-1)
    await emitted(store, "bob", 40, finish=False)  # the same id, another row, another owner
    clock.now += TRUSTED_FOR + 0.01
    for after, limit in ((3, 16), (0, 1000), (14, 5)):
        got = await reads.read(ID, after, limit)
        assert got is not None and got.page.owner == "bob"
        assert_same(got, (await truth(store, after))[: len(got.page.events)])
        assert len(got.page.events) >= min(limit, 41 - after)
        assert all(e.data.get("owner") != "ann" for e in got.page.events if e.type == "tick")


async def test_any_order_of_reads_says_what_the_store_says(store: Store) -> None:
    await emitted(store, "ann", 60, finish=True)  # cursors 1..62
    clock = Clock()
    rng = random.Random(7)
    for budget in (1 << 20, 6000, 0):  # ample, a few events' worth, nothing
        reads = reads_with(store, clock, budget)
        for _ in range(80):
            after, limit = rng.randrange(0, 64), rng.randrange(1, 30)
            got = await reads.read(ID, after, limit)
            assert got is not None
            events = got.page.events
            assert events == (await truth(store, after))[: len(events)]
            assert len(events) >= min(limit, 62 - after)
            assert got.frames == [frame(e) for e in events]
            assert reads.kept.size <= budget
            clock.now += rng.choice((0.0, 0.3, TRUSTED_FOR))


def page(owner: str, first: int, count: int, status: Status = Status.ACTIVE) -> StreamPage:
    events = [Event(first + k, "tick", {"pad": "x" * 50}) for k in range(count)]
    return StreamPage(owner, status, first + count - 1, 1, events)


def test_kept_logs_stay_within_the_budget_the_least_recently_used_going_first() -> None:
    one = len(frame(Event(10, "tick", {"pad": "x" * 50}))) * 2 + 200  # one event (ids 10..99)
    cache = ReplayCache(40 * one, clock=Clock())
    for n in range(5):
        cache.remember(f"i{n}", page("ann", 10, 8))
    assert cache.size == 40 * one
    cache.kept("i0", 0)  # looking does not count as use; a read's remember does
    cache.remember("i1", page("ann", 18, 1))  # i1 now holds 9 events: i0 goes
    assert cache.size <= 40 * one and cache.kept("i0", 0) is None
    assert cache.kept("i1", 0) is not None
    cache.remember("big", page("ann", 10, 30))  # one log keeps to a quarter, its latest events
    kept = cache.kept("big", 29)
    assert kept is not None and [e.cursor for e in kept[1]] == list(range(30, 40))
    assert cache.kept("big", 28) == (1, [], [])
    assert cache.size <= 40 * one


async def test_a_stream_of_a_kept_finished_log_takes_no_subscription(store: Store) -> None:
    await emitted(store, "ann", 5, finish=True)
    reads = reads_with(store, Clock())
    await reads.read(ID, 0, 1000)
    pubsub = MemoryPubSub()
    subscribed: list[str] = []
    subscribe = pubsub.subscribe

    def spying(channel: str) -> Any:
        subscribed.append(channel)
        return subscribe(channel)

    pubsub.subscribe = spying  # type: ignore[method-assign]

    class Sink:
        data = b""

        async def write(self, data: bytes) -> None:
            self.data += data

    sink = Sink()
    limits = StreamLimits(ping_interval=5, send_timeout=5, buffer_bytes=64 * 1024)
    await EventStream(reads, pubsub, ID, sink, limits, 2).run(set())
    assert sink.data == b"".join(frame(e) for e in await truth(store, 2))
    assert subscribed == []
