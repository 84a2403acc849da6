"""The reaper's retention: expired invocations deleted in bounded transactions, one after
another while more has expired, for at most half a pass's interval."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.unit.test_reaper import Enqueued, make_reaper, running, settings, shift
from tether.outcomes import completed
from tether.pubsub import MemoryPubSub
from tether.queue import Queue
from tether.services import Services
from tether.store import maintenance
from tether.store.maintenance import Expired
from tether.store.store import AppendRequest, FinishRequest, NewEvent, Store
from tether.worker import reaper as reaper_module
from tether.worker.reaper import Reaper


async def finished_long_ago(store: Store, events: int) -> str:
    invocation_id = await running(store)
    ticks = [NewEvent("tick", {"type": "tick"})] * events
    await store.append(AppendRequest(invocation_id, 1, ticks))
    await store.finish(FinishRequest(invocation_id, 1, completed({"ok": True})))
    await shift(store, invocation_id, finished_at=3600)
    return invocation_id


async def count_events(store: Store, invocation_id: str) -> int:
    return len(await store.events_after(invocation_id, 0))


async def test_retention_deletes_terminal_invocations_with_their_events_in_batches(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(maintenance, "EXPIRED_INVOCATIONS", 3)
    monkeypatch.setattr(reaper_module, "DELETE_BATCHES_PER_PASS", 2)
    expired = [await finished_long_ago(store, events=2) for _ in range(7)]
    recent = await running(store)
    await store.finish(FinishRequest(recent, 1, completed(1)))
    old_but_open = await running(store)
    await shift(store, old_but_open, created_at=3600, started_at=3600)
    reaper = make_reaper(store, Enqueued(), retention=600)

    first = await reaper.reap_once()  # two batches of three per pass
    assert (first.deleted, first.deleted_events) == (6, 6 * 4)
    assert (await reaper.reap_once()).deleted == 1
    assert (await reaper.reap_once()).deleted == 0
    for invocation_id in expired:
        assert await store.get(invocation_id) is None
        assert await count_events(store, invocation_id) == 0
    assert await store.get(recent) is not None and await count_events(store, recent) == 2
    assert await store.get(old_but_open) is not None


async def test_a_chatty_invocation_goes_over_several_transactions_of_one_pass(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(maintenance, "EXPIRED_EVENTS", 5)
    chatty = await finished_long_ago(store, events=20)  # 22 events: five transactions
    quiet = await finished_long_ago(store, events=1)
    done: list[Expired] = []
    delete_expired = store.delete_expired

    async def recorded(*args: Any) -> Expired:
        done.append(await delete_expired(*args))
        return done[-1]

    monkeypatch.setattr(store, "delete_expired", recorded)
    report = await make_reaper(store, Enqueued(), retention=600).reap_once()
    assert (report.deleted, report.deleted_events) == (2, 22 + 3)
    assert [(d.invocations, d.events) for d in done] == [(0, 5)] * 4 + [(1, 2), (1, 3)]
    assert await store.get(chatty) is None and await count_events(store, chatty) == 0
    assert await store.get(quiet) is None


async def one_per_transaction(store: Store, monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """``count`` expired invocations, and retention transactions of one invocation each."""
    monkeypatch.setattr(maintenance, "EXPIRED_INVOCATIONS", 1)
    for _ in range(count):
        await finished_long_ago(store, events=0)


async def test_a_pass_stops_deleting_after_half_its_interval(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await one_per_transaction(store, monkeypatch, 5)
    now = [0.0]

    def clock() -> float:  # each read a second later: a pass of interval 4 has 2 s to delete
        now[0] += 1.0
        return now[0]

    reaper = Reaper(
        services=Services(store, MemoryPubSub(), Queue(Enqueued())),
        settings=settings(retention=600, reaper_interval=4, heartbeat_interval=1),
        has_recover=True,
        clock=clock,
    )
    assert (await reaper.reap_once()).deleted == 2
    assert (await reaper.reap_once()).deleted == 2
    assert (await reaper.reap_once()).deleted == 1


async def test_a_pause_as_long_as_it_took_follows_each_transaction(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await one_per_transaction(store, monkeypatch, 3)
    pauses: list[float] = []
    sleep = asyncio.sleep

    async def recorded(delay: float, *args: Any) -> Any:
        pauses.append(delay)
        return await sleep(delay, *args)

    monkeypatch.setattr(asyncio, "sleep", recorded)
    assert (await make_reaper(store, Enqueued(), retention=600).reap_once()).deleted == 3
    assert len(pauses) == 3  # each batch of one was full: a fourth transaction finds none
    assert all(p > 0 for p in pauses)
