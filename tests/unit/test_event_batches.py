"""Attempts' events written together (``EventBatches``): what emits meanwhile goes along, readers
get only stored events and get them before the writer wakes, and a failed or abandoned write
loses nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import embedded_store
from tether.channels import events_channel
from tether.events import decode_batch
from tether.pubsub import MemoryPubSub, Subscription
from tether.pubsub_redis import RedisPubSub
from tether.store.journal import NewWait, WaitKind
from tether.store.schema import Claim, NewInvocation
from tether.store.store import AppendRequest, Store, StoreUnavailable, Superseded
from tether.worker.attempt import EventBatches, EventWriter


class WatchedStore(Store):
    """The embedded store, whose appends are recorded, can be held at a gate, and fail the next
    ``failures`` times as if the database went away."""

    failures = 0
    lost_answers = 0
    """The next appends that commit and then fail, as a commit whose answer the connection lost."""
    gate: asyncio.Event | None = None
    writing: asyncio.Event | None = None
    before_write: Any = None

    _appends: list[list[AppendRequest]] | None = None

    @property
    def appends(self) -> list[list[AppendRequest]]:
        if self._appends is None:
            self._appends = []
        return self._appends

    async def append_many(self, requests: Sequence[AppendRequest]) -> Any:
        self.appends.append(list(requests))
        if self.before_write is not None:
            self.before_write()
        if self.writing is not None:
            self.writing.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("OperationalError: server closed the connection")
        results = await super().append_many(requests)
        if self.lost_answers:
            self.lost_answers -= 1
            raise StoreUnavailable("OperationalError: server closed the connection")
        return results


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[WatchedStore]:
    async with embedded_store(WatchedStore, tmp_path) as s:
        yield s


async def claimed(store: Store) -> Claim:
    await store.accept(NewInvocation(str(uuid.uuid4()), "ann", None, {}, "h"))
    [claim] = await store.claim_next(1, "host:1")
    assert claim is not None
    return claim


async def two_writers(store: Store, pubsub: MemoryPubSub) -> list[tuple[Claim, EventWriter]]:
    """Two attempts claimed on ``store``, each with its writer, the two sharing one batch."""
    batches = EventBatches(store, pubsub)
    pairs = []
    for _ in range(2):
        claim = await claimed(store)
        pairs.append((claim, EventWriter(store, pubsub, claim, batches)))
    return pairs


def published(sub: Subscription) -> list[tuple[int, Any]]:
    out = []
    while sub._pending:
        out += [(e.cursor, e.data) for e in decode_batch(str(sub._pending.popleft()))]
    return out


async def stored(store: Store, claim: Claim) -> list[tuple[int, Any]]:
    events = await store.events_after(claim.invocation_id, claim.started_cursor)
    return [(e.cursor, e.data) for e in events]


async def test_what_attempts_emit_meanwhile_is_one_write_published_once_stored(
    store: WatchedStore,
) -> None:
    pubsub = MemoryPubSub()
    (first, a), (second, b) = await two_writers(store, pubsub)
    async with pubsub.subscribe(events_channel(first.invocation_id)) as sub:
        store.before_write = lambda: published(sub) == [] or pytest.fail("published unstored")
        cursors = [await a.emit("tick", {"n": n}) for n in range(3)]
        await b.emit("tick", {"n": 9})
        await a.flush()  # the batch published a's events before a woke
        assert published(sub) == [(c, {"n": n}) for n, c in enumerate(cursors)]
        await b.flush()
    assert [[len(r.events) for r in batch] for batch in store.appends] == [[3, 1]]
    assert await stored(store, first) == [(c, {"n": n}) for n, c in enumerate(cursors)]
    assert await stored(store, second) == [(second.started_cursor + 1, {"n": 9})]


class CountedPubSub(MemoryPubSub):
    """The in-process pub/sub, counting what is handed to it to publish."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: list[str] = []

    def publish_soon(self, channel: str, messages: list[str]) -> None:
        self.handed.append(channel)
        super().publish_soon(channel, messages)


async def test_events_nobody_in_the_process_listens_for_are_stored_and_not_encoded(
    store: WatchedStore,
) -> None:
    """In-process, a batch publishes only on channels with a subscription open; the events of
    the others are stored all the same (their readers, when they come, read the store)."""
    pubsub = CountedPubSub()
    (heard, a), (unheard, b) = await two_writers(store, pubsub)
    async with pubsub.subscribe(events_channel(heard.invocation_id)) as sub:
        assert pubsub.listened(events_channel(heard.invocation_id))
        assert not pubsub.listened(events_channel(unheard.invocation_id))
        cursor = await a.emit("tick", {"n": 1})
        await b.emit("tick", {"n": 2})
        await a.flush()
        await b.flush()
        assert published(sub) == [(cursor, {"n": 1})]
    assert pubsub.handed == [events_channel(heard.invocation_id)]
    assert not pubsub.listened(events_channel(heard.invocation_id))  # closed: nobody now
    assert await stored(store, unheard) == [(unheard.started_cursor + 1, {"n": 2})]


async def test_redis_pub_sub_counts_every_channel_as_listened() -> None:
    """Other processes' subscriptions are not known to this one: it always publishes."""
    pubsub = RedisPubSub("redis://127.0.0.1:1/0")  # never connected: nothing is sent here
    try:
        assert pubsub.listened(events_channel("i-1"))
    finally:
        await pubsub.close()


async def test_a_failed_write_keeps_its_events_in_order_for_the_next(store: WatchedStore) -> None:
    pubsub = MemoryPubSub()
    claim = await claimed(store)
    writer = EventWriter(store, pubsub, claim)
    store.gate, store.writing, store.failures = asyncio.Event(), asyncio.Event(), 1
    await writer.emit("tick", {"n": 0})
    await writer.emit("tick", {"n": 1})
    await store.writing.wait()  # the write has taken both
    await writer.emit("tick", {"n": 2})  # meanwhile: it goes after the two, whatever happens
    store.gate.set()
    with pytest.raises(StoreUnavailable):
        await writer.flush()
    await writer.flush()
    start = claim.started_cursor
    assert await stored(store, claim) == [(start + n + 1, {"n": n}) for n in range(3)]
    assert [len(r.events) for [r] in store.appends] == [2, 3]
    assert await writer.take_pending() == []


async def test_events_whose_write_committed_but_seemed_to_fail_are_not_written_twice(
    store: WatchedStore,
) -> None:
    """A connection lost during the commit (or a commit given up at ``timers.store_deadline``)
    may have committed: the retry writes only what the log does not hold yet, at the cursors
    ``emit`` returned."""
    claim = await claimed(store)
    writer = EventWriter(store, MemoryPubSub(), claim)
    store.lost_answers = 1
    cursors = [await writer.emit("tick", {"n": n}) for n in range(2)]
    with pytest.raises(StoreUnavailable):
        await writer.flush()
    cursors.append(await writer.emit("tick", {"n": 2}))
    await writer.flush()
    start = claim.started_cursor
    assert cursors == [start + 1, start + 2, start + 3]
    assert await stored(store, claim) == [(start + n + 1, {"n": n}) for n in range(3)]
    assert await writer.take_pending() == []


async def test_the_finish_does_not_take_events_a_write_that_seemed_to_fail_stored(
    store: WatchedStore,
) -> None:
    claim = await claimed(store)
    writer = EventWriter(store, MemoryPubSub(), claim)
    store.lost_answers = 1
    await writer.emit("tick", {"n": 0})  # its write commits, then seems to fail
    assert await writer.take_pending() == []
    assert await stored(store, claim) == [(claim.started_cursor + 1, {"n": 0})]


async def test_an_outage_is_logged_once_a_writer_and_its_end_once(
    store: WatchedStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Each emit during an outage retries the write: a WARNING at each (every 0.5 s per running
    invocation, as QA saw) said nothing the first had not. The first is a WARNING, the rest
    DEBUG, and the write that works again says how many failed."""
    caplog.set_level(logging.INFO, logger="tether.worker.attempt")
    writer = EventWriter(store, MemoryPubSub(), await claimed(store))
    store.failures = 3
    for n in range(3):
        await writer.emit("tick", {"n": n})
        with pytest.raises(StoreUnavailable):
            await writer.flush()
    await writer.flush()
    said = [(r.levelname, r.getMessage().split(": ", 1)[1]) for r in caplog.records]
    assert said == [
        ("WARNING", "writing events failed (StoreUnavailable)"),
        ("INFO", "events written again after 3 failed writes"),
    ]


async def test_a_write_whose_waiter_is_cancelled_still_stores_and_publishes(
    store: WatchedStore,
) -> None:
    pubsub = MemoryPubSub()
    claim = await claimed(store)
    writer = EventWriter(store, pubsub, claim)
    store.gate, store.writing = asyncio.Event(), asyncio.Event()
    async with pubsub.subscribe(events_channel(claim.invocation_id)) as sub:
        await writer.emit("tick", {"n": 0})
        flushing = asyncio.create_task(writer.flush())
        await store.writing.wait()
        flushing.cancel()  # the handler stopped while its events were being written
        with pytest.raises(asyncio.CancelledError):
            await flushing
        store.gate.set()
        assert await writer.take_pending() == []  # waits for the write: nothing left over
        assert published(sub) == [(claim.started_cursor + 1, {"n": 0})]
    assert await stored(store, claim) == [(claim.started_cursor + 1, {"n": 0})]


async def test_a_superseded_attempt_in_a_batch_fails_alone(store: WatchedStore) -> None:
    pubsub = MemoryPubSub()
    batches = EventBatches(store, pubsub)
    live, fenced = await claimed(store), await claimed(store)
    fenced = dataclasses.replace(fenced, attempt=fenced.attempt + 1)  # not the holder: refused
    a = EventWriter(store, pubsub, live, batches)
    b = EventWriter(store, pubsub, fenced, batches)
    await a.emit("tick", {"n": 0})
    await b.emit("tick", {"n": 1})
    with pytest.raises(Superseded):
        await b.flush()
    await a.flush()
    assert len(store.appends) == 1
    assert b.superseded
    with pytest.raises(Superseded):
        await b.emit("tick", {"n": 2})
    assert await stored(store, live) == [(live.started_cursor + 1, {"n": 0})]
    assert [(e.type, e.data) for e in await b.take_pending()] == [("tick", {"n": 1})]
    assert await stored(store, fenced) == []


async def test_a_publish_that_cannot_reach_redis_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pubsub = RedisPubSub("redis://127.0.0.1:1/0")  # nothing listens there
    try:
        pubsub.publish_soon(events_channel("i-1"), ["[]"])
        await pubsub._publishes.idle()
    finally:
        await pubsub.close()
    assert "publish to tether:events:i-1 failed (ConnectionError)" in caplog.text


async def test_the_finish_takes_what_was_emitted_while_a_write_ran(store: WatchedStore) -> None:
    """Events emitted during the last write go to the finish (its one transaction), not to a
    write of their own that the finish would wait for."""
    claim = await claimed(store)
    writer = EventWriter(store, MemoryPubSub(), claim)
    store.gate, store.writing = asyncio.Event(), asyncio.Event()
    await writer.emit("tick", {"n": 0})
    await store.writing.wait()
    await writer.emit("tick", {"n": 1})  # the handler's last event, while the write runs
    taking = asyncio.create_task(writer.take_pending())
    store.gate.set()
    assert [(e.type, e.data) for e in await taking] == [("tick", {"n": 1})]
    assert [len(r.events) for [r] in store.appends] == [1]


async def test_a_park_that_fails_gives_the_handler_back_its_events(
    store: WatchedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler carries on after a park the database refused: the events the park took are
    still its own, written by its next write."""

    async def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("OperationalError: server closed the connection")

    async def no_flush() -> None:  # as if n=1 came from another task after the park's flush
        return None

    claim = await claimed(store)
    writer = EventWriter(store, MemoryPubSub(), claim)
    store.gate, store.writing = asyncio.Event(), asyncio.Event()
    await writer.emit("tick", {"n": 0})
    await store.writing.wait()
    await writer.emit("tick", {"n": 1})  # buffered behind the write: the park takes it
    monkeypatch.setattr(writer, "flush", no_flush)
    monkeypatch.setattr(store.parks, "park_many", unavailable)
    store.gate.set()
    with pytest.raises(StoreUnavailable):
        await writer.park([NewWait("w", WaitKind.INPUT, {"prompt": "ok?"}, None)])
    assert not writer.parked
    await writer.emit("tick", {"n": 2})
    monkeypatch.undo()
    await writer.flush()
    start = claim.started_cursor
    assert await stored(store, claim) == [(start + n + 1, {"n": n}) for n in range(3)]


async def test_a_batch_of_publishes_reaches_redis_as_one_command_in_order(redis_url: str) -> None:
    """What is submitted while a batch is out goes out together (one script call), and each
    channel's subscribers get its messages in the order they were published."""
    pubsub = RedisPubSub(redis_url)
    calls: list[int] = []
    publish_all = pubsub._publish_all

    async def counted(args: list[str]) -> Any:
        calls.append(len(args) // 2)
        return await publish_all(args=args)

    pubsub._publish_all = counted  # type: ignore[assignment]
    a, b = events_channel(str(uuid.uuid4())), events_channel(str(uuid.uuid4()))
    try:
        async with pubsub.subscribe(a) as sub_a, pubsub.subscribe(b) as sub_b:
            for k in range(40):
                pubsub.publish_soon(a if k % 2 == 0 else b, [str(k)])
            await pubsub.publish(b, ["x", "y"])
            got_a = [await sub_a.get(timeout=5) for _ in range(20)]
            got_b = [await sub_b.get(timeout=5) for _ in range(22)]
    finally:
        await pubsub.close()
    assert got_a == [str(k) for k in range(0, 40, 2)]
    assert got_b == [*(str(k) for k in range(1, 40, 2)), "x", "y"]
    assert sum(calls) >= 41 and len(calls) < 41  # batched: fewer calls than messages


async def test_a_step_is_recorded_only_after_the_events_emitted_before_it(
    store: WatchedStore,
) -> None:
    """A replacement attempt replays a recorded step without storing again what was emitted
    before it, so a step's record never commits ahead of those events."""
    claim = await claimed(store)
    writer = EventWriter(store, MemoryPubSub(), claim)
    store.gate, store.writing = asyncio.Event(), asyncio.Event()
    await writer.emit("tick", {"n": 0})
    await store.writing.wait()  # the events' write is held
    recording = asyncio.create_task(writer.record_step("s", 1, None))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not recording.done()
    assert "s" not in (await store.journal.load(claim.invocation_id)).steps
    store.gate.set()
    await recording
    assert await stored(store, claim) == [(claim.started_cursor + 1, {"n": 0})]
    assert "s" in (await store.journal.load(claim.invocation_id)).steps
