"""The reaper: its pure decisions, and its passes against the embedded SQLite store."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tether.channels import events_channel
from tether.errors import ErrorCode
from tether.events import decode_batch
from tether.pubsub import MemoryPubSub
from tether.queue import Queue
from tether.services import Services
from tether.settings import Limits, Settings
from tether.store.errors import StoreError
from tether.store.schema import NewInvocation, StaleAttempt, Status, invocations
from tether.store.store import Store
from tether.worker.reaper import REQUEUE_BATCH, Reaper, Recover, decide, recovery_delay

inv = invocations.c


def settings(**timers: float) -> Settings:
    limits = {"max_attempts": int(timers.pop("max_attempts"))} if "max_attempts" in timers else {}
    return Settings.model_validate({"timers": {"stale_after": 10, **timers}, "limits": limits})


# -- decide and recovery_delay: pure ---------------------------------------------------------


def stale(attempt: int = 1, cancel_requested: bool = False, parks: int = 0) -> StaleAttempt:
    """An attempt that stopped beating, after ``parks`` earlier attempts that parked (waited)
    and the rest that crashed."""
    return StaleAttempt("inv", attempt, cancel_requested, crashes=attempt - 1 - parks)


def test_a_dead_first_attempt_is_replaced_at_once() -> None:
    assert decide(stale(1), has_recover=True, settings=settings()) == Recover(0.0)


def test_without_recover_a_dead_attempt_fails_with_worker_lost() -> None:
    outcome = decide(stale(1), has_recover=False, settings=settings())
    assert not isinstance(outcome, Recover)
    assert outcome.status is Status.FAILED and outcome.error_code == ErrorCode.WORKER_LOST.value
    assert outcome.event_type == "run.failed"
    assert outcome.event_data["error"]["code"] == "worker_lost"


def test_a_cancel_request_wins_over_recovery_and_over_the_attempt_limit() -> None:
    for has_recover in (True, False):
        outcome = decide(
            stale(5, cancel_requested=True),
            has_recover=has_recover,
            settings=settings(max_attempts=3),
        )
        assert not isinstance(outcome, Recover)
        assert outcome.status is Status.CANCELLED and outcome.event_type == "run.cancelled"


def test_attempts_that_parked_do_not_count_towards_max_attempts() -> None:
    limited = settings(max_attempts=3)
    assert isinstance(decide(stale(50, parks=48), has_recover=True, settings=limited), Recover)
    assert not isinstance(decide(stale(50, parks=47), has_recover=True, settings=limited), Recover)


def test_the_first_crash_after_many_parks_is_replaced_at_once() -> None:
    timers = settings(recovery_backoff=1, recovery_backoff_max=60)
    assert decide(stale(12, parks=11), has_recover=True, settings=timers) == Recover(0.0)
    assert decide(stale(12, parks=10), has_recover=True, settings=timers) == Recover(1.0)


def test_max_attempts_counts_every_attempt_then_fails_recovery_limit_exceeded() -> None:
    limited = settings(max_attempts=3)
    assert isinstance(decide(stale(1), has_recover=True, settings=limited), Recover)
    assert isinstance(decide(stale(2), has_recover=True, settings=limited), Recover)
    outcome = decide(stale(3), has_recover=True, settings=limited)
    assert not isinstance(outcome, Recover)
    assert outcome.status is Status.FAILED
    assert outcome.error_code == ErrorCode.RECOVERY_LIMIT_EXCEEDED.value


def test_no_max_attempts_means_no_limit() -> None:
    unlimited = settings(max_attempts=0)
    assert isinstance(decide(stale(10_000), has_recover=True, settings=unlimited), Recover)


def test_recovery_backoff_doubles_from_the_second_replacement_up_to_the_cap() -> None:
    s = settings(recovery_backoff=1.5, recovery_backoff_max=10)
    assert [recovery_delay(a, s) for a in range(1, 7)] == [0.0, 1.5, 3.0, 6.0, 10.0, 10.0]
    assert recovery_delay(0, s) == 0.0


def test_recovery_backoff_of_a_poison_pill_never_overflows() -> None:
    s = settings(recovery_backoff=1, recovery_backoff_max=60)
    assert recovery_delay(2_000, s) == 60.0
    assert recovery_delay(10**9, s) == 60.0
    assert recovery_delay(2_000, settings(recovery_backoff=0)) == 0.0


# -- reaper passes on the embedded store -----------------------------------------------------


class Enqueued:
    """The reaper's queue transport, recorded."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, float]] = []
        self.fail = fail
        self.held = 0
        """Messages the fake broker says are waiting."""

    async def send(self, invocation_ids: Sequence[str], delay: float) -> None:
        if self.fail:
            raise ConnectionError("redis is down")
        self.calls.extend((invocation_id, delay) for invocation_id in invocation_ids)

    async def waiting(self) -> int:
        return self.held

    async def close(self) -> None:
        return None


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "tether.db")


@pytest.fixture
async def store(db_path: str) -> AsyncIterator[Store]:
    s = Store.embedded(db_path)
    await s.migrate()
    try:
        yield s
    finally:
        await s.close()


def make_reaper(
    store: Store,
    enqueue: Enqueued,
    *,
    has_recover: bool = True,
    pubsub: MemoryPubSub | None = None,
    **timers: float,
) -> Reaper:
    return Reaper(
        services=Services(store, pubsub or MemoryPubSub(), Queue(enqueue)),
        settings=settings(**timers),
        has_recover=has_recover,
    )


async def accepted(store: Store, session: str | None = None) -> str:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "ann", session, {"x": 1}, "h"))
    return invocation_id


async def running(store: Store, session: str | None = None) -> str:
    invocation_id = await accepted(store, session)
    assert await store.claim(invocation_id, "host:1") is not None
    return invocation_id


async def shift(store: Store, invocation_id: str, **seconds: float) -> None:
    """Move timestamps into the past, as if that much time had gone by."""
    values = {column: inv[column] - delta for column, delta in seconds.items()}
    async with store.engine.begin() as conn:
        await conn.execute(sa.update(invocations).where(inv.id == invocation_id).values(values))


async def row(store: Store, invocation_id: str) -> Any:
    async with store.engine.connect() as conn:
        return (await conn.execute(sa.select(invocations).where(inv.id == invocation_id))).first()


async def test_a_live_attempt_is_left_alone(store: Store) -> None:
    invocation_id = await running(store)
    enqueued = Enqueued()
    report = await make_reaper(store, enqueued).reap_once()
    assert report.recovered == 0 and enqueued.calls == []
    assert (await row(store, invocation_id)).status == "active"


async def test_a_stale_attempt_is_requeued_once_even_by_two_concurrent_reapers(
    db_path: str, store: Store
) -> None:
    invocation_id = await running(store)
    await shift(store, invocation_id, heartbeat_at=60)
    other = Store.embedded(db_path)  # a second worker process's reaper, its own connections
    try:
        first, second = Enqueued(), Enqueued()
        reports = await asyncio.gather(
            make_reaper(store, first).reap_once(), make_reaper(other, second).reap_once()
        )
    finally:
        await other.close()
    assert sum(r.recovered for r in reports) == 1
    assert first.calls + second.calls == [(invocation_id, 0.0)]
    after = await row(store, invocation_id)
    assert (after.status, after.attempt, after.worker) == ("queued", 1, None)
    replacement = await store.claim(invocation_id, "host:2")
    assert replacement is not None and replacement.attempt == 2
    assert replacement.started_cursor == after.last_event_id + 1  # the log continues


async def test_a_second_replacement_waits_for_its_backoff(store: Store) -> None:
    invocation_id = await running(store)
    for _ in range(2):  # attempt 1 dies, attempt 2 starts and dies too
        await shift(store, invocation_id, heartbeat_at=60)
        await make_reaper(store, Enqueued(), recovery_backoff=5).reap_once()
        await shift(store, invocation_id, enqueued_at=10)  # the backoff elapsed
        assert await store.claim(invocation_id, "host:2") is not None
    await shift(store, invocation_id, heartbeat_at=60)
    enqueued = Enqueued()
    await make_reaper(store, enqueued, recovery_backoff=5, requeue_after=1).reap_once()
    assert enqueued.calls == [(invocation_id, 10.0)]  # third replacement: 5 × 2
    again = Enqueued()
    await make_reaper(store, again, requeue_after=1).reap_once()
    assert again.calls == []  # enqueued_at is in the future: no early re-enqueue


async def test_without_recover_a_stale_attempt_fails_worker_lost_and_wakes_readers(
    store: Store,
) -> None:
    invocation_id = await running(store, session="s")
    successor = await accepted(store, session="s")
    await shift(store, invocation_id, heartbeat_at=60)
    pubsub, enqueued = MemoryPubSub(), Enqueued()
    async with pubsub.subscribe(events_channel(invocation_id)) as sub:
        report = await make_reaper(store, enqueued, has_recover=False, pubsub=pubsub).reap_once()
        message = await sub.get(timeout=1)
    assert report.failed == 1
    assert isinstance(message, str) and [e.type for e in decode_batch(message)] == ["run.failed"]
    done = await store.get(invocation_id)
    assert done is not None and done.status is Status.FAILED and done.error_code == "worker_lost"
    assert enqueued.calls == [(successor, 0.0)]  # the session moves on


async def test_a_stale_attempt_past_max_attempts_fails_recovery_limit_exceeded(
    store: Store,
) -> None:
    invocation_id = await running(store)
    await shift(store, invocation_id, heartbeat_at=60)
    report = await make_reaper(store, Enqueued(), max_attempts=1).reap_once()
    assert report.failed == 1
    done = await store.get(invocation_id)
    assert done is not None and done.error_code == "recovery_limit_exceeded"


async def test_a_poison_run_whose_worker_dies_every_attempt_stops_at_the_default_limit(
    store: Store,
) -> None:
    assert Limits().max_attempts == 5
    invocation_id = await running(store)
    enqueued = Enqueued()
    for attempt in range(1, 5):
        await shift(store, invocation_id, heartbeat_at=60)  # attempt N's worker died
        assert (await make_reaper(store, enqueued).reap_once()).recovered == 1
        replacement = await store.claim(invocation_id, "host:1")
        assert replacement is not None and replacement.attempt == attempt + 1
    await shift(store, invocation_id, heartbeat_at=60)  # and the fifth one's too
    report = await make_reaper(store, enqueued).reap_once()
    assert report.failed == 1 and report.recovered == 0
    done = await store.get(invocation_id)
    assert done is not None and (done.status, done.attempt) == (Status.FAILED, 5)
    assert done.error_code == "recovery_limit_exceeded"
    assert [invocation_id] * 4 == [sent for sent, _ in enqueued.calls]


async def test_a_stale_attempt_with_a_cancel_request_ends_cancelled(store: Store) -> None:
    invocation_id = await running(store)
    await store.request_cancel(invocation_id)
    await shift(store, invocation_id, heartbeat_at=60)
    report = await make_reaper(store, Enqueued()).reap_once()
    assert report.cancelled == 1
    done = await store.get(invocation_id)
    assert done is not None and done.status is Status.CANCELLED


async def test_an_unclaimed_queued_invocation_is_re_enqueued_once_per_period(store: Store) -> None:
    fresh, lost = await accepted(store), await accepted(store)
    await shift(store, lost, enqueued_at=60)
    enqueued = Enqueued()
    reaper = make_reaper(store, enqueued, requeue_after=30)
    assert (await reaper.reap_once()).requeued == 1
    assert (await reaper.reap_once()).requeued == 0
    assert enqueued.calls == [(lost, 0.0)] and fresh not in dict(enqueued.calls)


async def test_unclaimed_work_behind_enough_waiting_messages_is_not_re_sent(store: Store) -> None:
    """A message only lets a worker claim the next fair invocation: a backlog draining behind
    REQUEUE_BATCH waiting messages needs none re-sent; with fewer, the rest of the batch is."""
    overdue = [await accepted(store) for _ in range(3)]
    for invocation_id in overdue:
        await shift(store, invocation_id, enqueued_at=60)
    enqueued = Enqueued()
    enqueued.held = REQUEUE_BATCH
    reaper = make_reaper(store, enqueued, requeue_after=30)
    assert (await reaper.reap_once()).requeued == 0
    enqueued.held = REQUEUE_BATCH - 2
    assert (await reaper.reap_once()).requeued == 2
    enqueued.held = 0
    assert (await reaper.reap_once()).requeued == 1  # the third; the first two are not due
    assert sorted(sent for sent, _ in enqueued.calls) == sorted(overdue)


async def test_a_failed_enqueue_does_not_abort_the_pass(store: Store) -> None:
    dead = [await running(store) for _ in range(3)]
    for invocation_id in dead:
        await shift(store, invocation_id, heartbeat_at=60)
    report = await make_reaper(store, Enqueued(fail=True)).reap_once()
    assert report.recovered == 3  # all requeued; take_unclaimed sends them once Redis is back
    for invocation_id in dead:
        assert (await row(store, invocation_id)).status == "queued"


async def test_the_reaper_audits_the_open_counts_once_a_period(store: Store) -> None:
    """The first audit one period after start (workers starting together spread theirs), then
    one a period; ``tether reap`` audits at once; 0 never."""
    now = [0.0]

    async def drifted_then_reaped(reaper: Reaper) -> int:
        async with store.engine.begin() as conn:
            await conn.execute(sa.text("UPDATE tether_open_counts SET open_count = 0"))
        return (await reaper.reap_once()).counts_corrected

    await accepted(store)  # ann: an owner count and a tenant count
    services = Services(store, MemoryPubSub(), Queue(Enqueued()))
    every = settings(count_audit=60)
    reaper = Reaper(services=services, settings=every, has_recover=True, clock=lambda: now[0])
    assert await drifted_then_reaped(reaper) == 0
    now[0] = 72.0  # past the first period and its jitter
    assert await drifted_then_reaped(reaper) == 2
    now[0] = 119.0  # within the next one
    assert await drifted_then_reaped(reaper) == 0
    now[0] = 72.0 + 72.0
    assert await drifted_then_reaped(reaper) == 2
    off = settings(count_audit=0)
    never = Reaper(services=services, settings=off, has_recover=True)
    assert await drifted_then_reaped(never) == 0
    by_hand = Reaper(services=services, settings=off, has_recover=True, audit_now=True)
    assert await drifted_then_reaped(by_hand) == 2  # tether reap audits even when it is off
    assert await drifted_then_reaped(by_hand) == 0  # once


async def test_a_failed_audit_is_logged_and_the_pass_still_reports(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def fails() -> list[tuple[str, str]]:
        raise StoreError("the database went away")

    invocation_id = await running(store)
    await shift(store, invocation_id, heartbeat_at=60)
    monkeypatch.setattr(store, "audit_open_counts", fails)
    reaper = make_reaper(store, Enqueued())
    reaper = Reaper(
        services=reaper.services, settings=reaper.settings, has_recover=True, audit_now=True
    )
    report = await reaper.reap_once()
    assert report.recovered == 1 and report.counts_corrected == 0
    assert "open count audit failed (the database went away)" in caplog.text


async def test_the_reaper_checks_the_planner_statistics_once_a_period(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """At the first pass, then once every ``timers.statistics_check``, a pass early by no more
    than its jitter included (20 % of ``timers.reaper_interval``, 2 s); 0 never; a failure is
    logged and the pass still reports."""
    now = [0.0]
    checks: list[float] = []

    async def check() -> None:
        checks.append(now[0])
        if now[0] >= 10:
            raise StoreError("the database went away")

    monkeypatch.setattr(store.statistics, "check", check)
    services = Services(store, MemoryPubSub(), Queue(Enqueued()))
    every = settings(statistics_check=2)
    reaper = Reaper(services=services, settings=every, has_recover=True, clock=lambda: now[0])
    for at in (0.0, 1.0, 2.0, 3.5, 3.7, 4.0, 10.0):
        now[0] = at
        await reaper.reap_once()
    assert checks == [0.0, 2.0, 3.7, 10.0]
    assert "planner statistics check failed (the database went away)" in caplog.text
    never = Reaper(services=services, settings=settings(statistics_check=0), has_recover=True)
    await never.reap_once()
    assert checks == [0.0, 2.0, 3.7, 10.0]
