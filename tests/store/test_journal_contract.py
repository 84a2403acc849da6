"""Durable execution's rows on both stores: steps fenced, park, input, timers, cancel, sessions."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from tether.jsonvalue import as_stored
from tether.store.journal import InputAnswer, NewWait, Resolution, WaitKind
from tether.store.schema import Claim, NewInvocation, Status, waits
from tether.store.store import Store
from tether.store.writes import NewEvent


async def running(store: Store, session: str | None = None, owner: str = "ann") -> Claim:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, owner, session, {"n": 1}, "h"))
    claim = await store.claim(invocation_id, "host:1")
    assert claim is not None
    return claim


def input_wait(name: str = "w", timeout: float | None = None) -> NewWait:
    return NewWait(name, WaitKind.INPUT, {"prompt": "ok?"}, timeout)


async def parked(store: Store, wait: NewWait | None = None, session: str | None = None) -> Claim:
    claim = await running(store, session)
    tick = NewEvent("tick", {"type": "tick"})
    stored = await store.parks.park(
        claim.invocation_id, claim.attempt, [wait or input_wait()], [tick]
    )
    assert stored is not None
    return claim


async def make_due(store: Store, invocation_id: str) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(
            sa.update(waits)
            .where(waits.c.invocation_id == invocation_id)
            .values(wake_at=waits.c.wake_at - 3600)
        )


async def test_a_step_is_recorded_under_the_fence_and_the_first_record_wins(store: Store) -> None:
    claim = await running(store)
    assert await store.journal.record_step(claim.invocation_id, claim.attempt, "s", {"v": 1}, None)
    assert await store.journal.record_step(claim.invocation_id, claim.attempt, "s", {"v": 2}, None)
    assert not await store.journal.record_step(claim.invocation_id, 99, "t", 1, None)
    recorded = await store.journal.load(claim.invocation_id)
    assert recorded.steps["s"].result == {"v": 1} and "t" not in recorded.steps


async def test_the_record_made_last_is_the_wait_the_attempt_parked_on(store: Store) -> None:
    """What a resumed attempt must replay to be past everything earlier attempts emitted (a
    record made at the same moment, to the clock's precision, is among the last too)."""
    claim = await running(store)
    assert await store.journal.record_step(claim.invocation_id, claim.attempt, "a", 1, None)
    assert (await store.journal.load(claim.invocation_id)).last == {"a"}
    await store.parks.park(claim.invocation_id, claim.attempt, [input_wait()])
    assert (await store.journal.load(claim.invocation_id)).last == {"a"}  # w: not resolved
    assert await store.journal.resolve_input(claim.invocation_id, "w", 1) is InputAnswer.RESUMED
    assert "w" in (await store.journal.load(claim.invocation_id)).last


@pytest.mark.parametrize("value", [1e23, 1.5e20, -0.0, 1e-7, 0.1, {"n": [2e16, 0.5, 1e300]}])
async def test_a_steps_first_run_sees_the_value_its_replays_will(store: Store, value: Any) -> None:
    """A step's result is recorded (and handed to its first run) as ``as_stored`` copies it:
    PostgreSQL's jsonb gives 1e23 back as 10**23, an int, and -0.0 as 0.0, so a plain JSON copy
    differed from every replay there; the copy is what both stores give back."""
    claim = await running(store)
    first = as_stored(value)
    assert await store.journal.record_step(claim.invocation_id, claim.attempt, "s", first, None)
    replayed = (await store.journal.load(claim.invocation_id)).steps["s"].result
    assert repr(replayed) == repr(first)


async def test_parking_ends_the_attempt_as_waiting_with_its_events(store: Store) -> None:
    claim = await parked(store, input_wait(timeout=60))
    invocation = await store.get(claim.invocation_id)
    assert invocation is not None and invocation.status is Status.WAITING
    events = await store.events_after(claim.invocation_id, 0)
    assert [e.type for e in events] == ["run.started", "tick", "run.waiting"]
    (entry,) = events[-1].data["waiting_for"]
    assert entry["wait"] == "w" and entry["prompt"] == "ok?" and entry["expires_at"]
    (wait,) = (await store.journal.waiting_for([claim.invocation_id]))[claim.invocation_id]
    assert wait.name == "w" and not wait.resolved
    assert await store.parks.park(claim.invocation_id, claim.attempt, [input_wait("x")], []) is None


async def test_input_resumes_once_is_idempotent_and_conflicts_on_another_value(
    store: Store,
) -> None:
    claim = await parked(store)
    journal = store.journal
    assert await journal.resolve_input(claim.invocation_id, "nope", 1) is InputAnswer.UNKNOWN
    assert await journal.resolve_input(claim.invocation_id, "w", {"a": 1}) is InputAnswer.RESUMED
    assert await journal.resolve_input(claim.invocation_id, "w", {"a": 1}) is InputAnswer.ALREADY
    assert await journal.resolve_input(claim.invocation_id, "w", {"a": 2}) is InputAnswer.CONFLICT
    resumed = await store.claim(claim.invocation_id, "host:2")
    assert resumed is not None and resumed.resumed_by == "resume" and not resumed.is_recovery
    events = await store.events_after(claim.invocation_id, 3)
    assert [e.type for e in events] == ["run.resumed"]
    recorded = await journal.load(claim.invocation_id)
    assert recorded.waits["w"].value == {"a": 1}
    assert recorded.waits["w"].resolution is Resolution.INPUT


@pytest.mark.parametrize("value", [1e300, 1.5e20, -0.0, {"n": [2e16, 0.5]}])
async def test_the_same_input_again_is_idempotent_however_the_store_spells_its_numbers(
    store: Store, value: Any
) -> None:
    """PostgreSQL's jsonb keeps a number's value, not its spelling: 1e300 comes back as
    1000...0 (an int to Python), -0.0 as 0. The same value posted again is still the same."""
    claim = await parked(store)
    journal = store.journal
    assert await journal.resolve_input(claim.invocation_id, "w", value) is InputAnswer.RESUMED
    assert await journal.resolve_input(claim.invocation_id, "w", value) is InputAnswer.ALREADY
    assert await journal.resolve_input(claim.invocation_id, "w", [value]) is InputAnswer.CONFLICT


async def test_concurrent_inputs_resume_exactly_once(store: Store) -> None:
    claim = await parked(store)
    answers = await asyncio.gather(
        *(store.journal.resolve_input(claim.invocation_id, "w", i) for i in range(8))
    )
    assert answers.count(InputAnswer.RESUMED) == 1
    assert set(answers) <= {InputAnswer.RESUMED, InputAnswer.CONFLICT}


async def test_input_for_a_wait_the_invocation_is_not_parked_on_is_refused(store: Store) -> None:
    claim = await running(store)
    async with store.engine.begin() as conn:  # a wait row of a run that is active again
        await conn.execute(
            waits.insert().values(
                invocation_id=claim.invocation_id,
                name="w",
                kind="input",
                details={},
                created_at=0.0,
            )
        )
    answer = await store.journal.resolve_input(claim.invocation_id, "w", 1)
    assert answer is InputAnswer.NOT_WAITING
    assert not (await store.journal.load(claim.invocation_id)).waits["w"].resolved


async def test_a_timer_pass_resumes_at_most_its_limit_soonest_first(store: Store) -> None:
    """Every pass runs one statement, built once with its limit a parameter: each pass here
    takes the next soonest (on PostgreSQL the later ones run it as a plan of its own,
    ``tether.store.plans``, which compiles a statement the second time it sees it)."""
    sleepers = [
        await parked(store, NewWait("sleep#1", WaitKind.SLEEP, {}, 30 + n)) for n in range(3)
    ]
    for claim in sleepers:
        await make_due(store, claim.invocation_id)
    for claim in sleepers:
        assert await store.journal.fire_due(limit=1) == [claim.invocation_id]
    assert await store.journal.fire_due(limit=1) == []


async def test_due_timers_resume_the_invocation_and_time_out_input_waits(store: Store) -> None:
    sleeper = await parked(store, NewWait("sleep#1", WaitKind.SLEEP, {}, 30))
    waiter = await parked(store, input_wait(timeout=30))
    assert await store.journal.fire_due() == []
    for claim in (sleeper, waiter):
        await make_due(store, claim.invocation_id)
    assert sorted(await store.journal.fire_due()) == sorted(
        [sleeper.invocation_id, waiter.invocation_id]
    )
    assert await store.journal.fire_due() == []
    slept = await store.journal.load(sleeper.invocation_id)
    timed_out = await store.journal.load(waiter.invocation_id)
    assert slept.waits["sleep#1"].resolution is Resolution.ELAPSED
    assert timed_out.waits["w"].resolution is Resolution.TIMEOUT
    answer = await store.journal.resolve_input(waiter.invocation_id, "w", 1)
    assert answer is InputAnswer.TIMED_OUT  # too late: the timeout won


async def test_input_past_a_waits_timeout_is_too_late_before_its_timer_fires(
    store: Store,
) -> None:
    """No timer pass ran yet (no worker, or between passes): the value still loses."""
    waiter = await parked(store, input_wait(timeout=30))
    await make_due(store, waiter.invocation_id)
    answer = await store.journal.resolve_input(waiter.invocation_id, "w", "late")
    assert answer is InputAnswer.TIMED_OUT
    assert await store.journal.fire_due() == [waiter.invocation_id]
    timed_out = await store.journal.load(waiter.invocation_id)
    assert timed_out.waits["w"].resolution is Resolution.TIMEOUT


async def test_cancelling_a_waiting_invocation_ends_it_at_once(store: Store) -> None:
    claim = await parked(store)
    finished = await store.request_cancel(claim.invocation_id)
    assert finished is not None
    invocation = await store.get(claim.invocation_id)
    assert invocation is not None and invocation.status is Status.CANCELLED
    assert invocation.error_code == "cancelled" and invocation.attempt == claim.attempt
    answer = await store.journal.resolve_input(claim.invocation_id, "w", 1)
    assert answer is InputAnswer.NOT_WAITING


async def test_a_parked_invocation_keeps_its_sessions_turn(store: Store) -> None:
    first = await parked(store, session="s1")
    second_id = str(uuid.uuid4())
    await store.accept(NewInvocation(second_id, "ann", "s1", 2, "h2"))
    assert await store.claim(second_id, "host:1") is None
    await store.journal.resolve_input(first.invocation_id, "w", "go")
    assert await store.claim(second_id, "host:1") is None  # the first is queued again, ahead
    assert await store.claim(first.invocation_id, "host:1") is not None


async def test_retention_deletes_steps_and_waits_with_their_invocation(store: Store) -> None:
    claim = await parked(store)
    await store.journal.record_step(claim.invocation_id, claim.attempt, "s", 1, None)
    await store.request_cancel(claim.invocation_id)
    async with store.engine.begin() as conn:
        await conn.execute(sa.text("UPDATE tether_invocations SET finished_at = 0"))
    assert (await store.delete_expired(retention=1.0)).invocations == 1
    recorded: Any = await store.journal.load(claim.invocation_id)
    assert recorded.steps == {} and recorded.waits == {}


@pytest.mark.parametrize("parks", [3])
async def test_parks_are_not_crashes(store: Store, parks: int) -> None:
    claim = await running(store)
    for _ in range(parks):
        await store.parks.park(claim.invocation_id, claim.attempt, [input_wait(f"w{_}")], [])
        await store.journal.resolve_input(claim.invocation_id, f"w{_}", 1)
        resumed = await store.claim(claim.invocation_id, "host:1")
        assert resumed is not None
        claim = resumed
    async with store.engine.connect() as conn:
        crashes = await conn.scalar(
            sa.text("SELECT crashes FROM tether_invocations WHERE id = :id"),
            {"id": claim.invocation_id},
        )
    assert crashes == 0 and claim.attempt == parks + 1
