"""One contract for both stores: accept, claim, fence, finish, sessions, reaper queries, and
the batched form of every verb."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from tests.store.rows import claimed, new
from tether.errors import ErrorCode
from tether.events import RUN_COMPLETED, Event
from tether.outcomes import cancelled, completed, failed
from tether.store.schema import INVOCATION_COLUMNS, Claim, NewInvocation, Status, invocations
from tether.store.store import (
    Accepted,
    AppendRequest,
    Conflict,
    Finished,
    FinishRequest,
    NewEvent,
    OwnerLimitReached,
    Store,
    Superseded,
)


async def age(store: Store, invocation_id: str, column: str, seconds: float) -> None:
    """Move a timestamp into the past, as if time had passed."""
    async with store.engine.begin() as conn:
        col = invocations.c[column]
        await conn.execute(
            sa.update(invocations)
            .where(invocations.c.id == invocation_id)
            .values({column: col - seconds})
        )


async def test_accept_is_idempotent_and_conflicts_on_a_different_request(store: Store) -> None:
    n = new()
    first = await store.accept(n)
    again = await store.accept(n)
    assert first.created and not again.created
    assert again.invocation.id == n.id and again.invocation.status is Status.QUEUED
    with pytest.raises(Conflict):
        await store.accept(NewInvocation(n.id, n.owner, None, 2, "other"))
    with pytest.raises(Conflict):
        await store.accept(NewInvocation(n.id, "bob", None, 1, "h"))


async def test_concurrent_accepts_of_one_id_create_it_once(store: Store) -> None:
    n = new()
    results = await asyncio.gather(*(store.accept(n) for _ in range(10)))
    assert sum(r.created for r in results) == 1


async def test_owner_limit_counts_unfinished_invocations(store: Store) -> None:
    await store.accept(new(), max_open_per_owner=2)
    await store.accept(new(), max_open_per_owner=2)
    with pytest.raises(OwnerLimitReached):
        await store.accept(new(), max_open_per_owner=2)
    await store.accept(new(owner="bob"), max_open_per_owner=2)
    assert len(await store.list_owned("ann")) == 2  # the refused one was not kept


async def test_claim_has_one_winner_and_starts_the_event_log(store: Store) -> None:
    n = new()
    await store.accept(n)
    claims = await asyncio.gather(*(store.claim(n.id, f"w{i}") for i in range(5)))
    won = [c for c in claims if c is not None]
    assert len(won) == 1 and won[0].attempt == 1 and won[0].started_cursor == 1
    assert await store.events_after(n.id, 0) == [
        Event(1, "run.started", {"type": "run.started", "attempt": 1})
    ]


async def test_events_continue_the_cursor_and_are_fenced(store: Store) -> None:
    n = new()
    await store.accept(n)
    claim = await store.claim(n.id, "w")
    assert claim is not None
    events = [NewEvent("a", {"type": "a"}), NewEvent("b", {"type": "b"})]
    stored = await store.append(AppendRequest(n.id, 1, events))
    assert [e.cursor for e in stored] == [2, 3]
    with pytest.raises(Superseded):
        await store.append(AppendRequest(n.id, 2, [NewEvent("c", {})]))
    with pytest.raises(Superseded):
        await store.save_checkpoint(n.id, 2, {"x": 1})
    pending = [NewEvent("d", {"type": "d"})]
    finished = await store.finish(FinishRequest(n.id, 1, completed({"ok": True}), pending))
    assert [e.cursor for e in finished.events] == [4, 5]
    assert finished.events[-1].type == RUN_COMPLETED
    with pytest.raises(Superseded):
        await store.finish(FinishRequest(n.id, 1, completed(1)))
    done = await store.get(n.id)
    assert done is not None and done.status is Status.COMPLETED and done.output == {"ok": True}
    assert done.last_event_id == 5


async def test_a_session_runs_its_head_only_and_names_the_successor(store: Store) -> None:
    first, second, third = new(session="s"), new(session="s"), new(session="s")
    for n in (first, second, third):
        await store.accept(n)
    assert await store.claim(second.id, "w") is None
    assert await store.claim(first.id, "w") is not None
    assert await store.claim(second.id, "w") is None
    finished = await store.finish(FinishRequest(first.id, 1, completed(1)))
    assert finished.successor_id == second.id
    assert await store.claim(third.id, "w") is None
    assert await store.claim(second.id, "w") is not None


async def test_sessions_are_scoped_by_owner(store: Store) -> None:
    mine, theirs = new(session="s"), new(owner="bob", session="s")
    await store.accept(mine)
    await store.accept(theirs)
    assert await store.claim(mine.id, "w") is not None
    assert await store.claim(theirs.id, "w") is not None


async def test_cancel_queued_is_immediate_and_active_is_flagged(store: Store) -> None:
    queued, active = new(), new()
    await store.accept(queued)
    await store.accept(active)
    await store.claim(active.id, "w")
    finished = await store.request_cancel(queued.id)
    assert finished is not None and [e.type for e in finished.events] == ["run.cancelled"]
    assert await store.request_cancel(active.id) is None
    assert await store.heartbeat([(active.id, 1)]) == {active.id: True}
    await store.finish(FinishRequest(active.id, 1, cancelled()))
    state = await store.get(active.id)
    assert state is not None and state.status is Status.CANCELLED


async def test_heartbeat_reports_only_live_attempts(store: Store) -> None:
    a, b = new(), new()
    for n in (a, b):
        await store.accept(n)
        await store.claim(n.id, "w")
    assert await store.heartbeat([(a.id, 1), (b.id, 7)]) == {a.id: False}
    assert await store.heartbeat([]) == {}


async def test_stale_attempts_are_requeued_once_for_a_replacement(store: Store) -> None:
    n = new()
    await store.accept(n)
    await store.claim(n.id, "w")
    assert await store.stale_attempts(5) == []
    await age(store, n.id, "heartbeat_at", 60)
    [stale] = await store.stale_attempts(5)
    assert (stale.invocation_id, stale.attempt) == (n.id, 1)
    results = await asyncio.gather(*(store.requeue_for_recovery(n.id, 1, 5, 0) for _ in range(3)))
    assert sorted(results) == [False, False, True]
    replacement = await store.claim(n.id, "w2")
    assert replacement is not None and replacement.attempt == 2 and replacement.started_cursor == 2
    with pytest.raises(Superseded):
        await store.append(AppendRequest(n.id, 1, [NewEvent("late", {})]))


async def test_finish_with_stale_after_skips_a_live_attempt(store: Store) -> None:
    n = new()
    await store.accept(n)
    await store.claim(n.id, "w")
    with pytest.raises(Superseded):
        await store.finish(FinishRequest(n.id, 1, cancelled(), stale_after=5))


async def test_unclaimed_queued_work_is_taken_once_per_threshold(store: Store) -> None:
    n = new()
    await store.accept(n)
    assert await store.take_unclaimed(30) == []
    await age(store, n.id, "enqueued_at", 60)
    assert await store.take_unclaimed(30) == [n.id]
    assert await store.take_unclaimed(30) == []


async def test_retention_deletes_old_terminal_invocations_with_their_events(store: Store) -> None:
    old, recent = new(), new()
    for n in (old, recent):
        await store.accept(n)
        await store.claim(n.id, "w")
        await store.finish(FinishRequest(n.id, 1, completed(1)))
    await age(store, old.id, "finished_at", 3600)
    assert (await store.delete_expired(600, limit=10)).invocations == 1
    assert await store.get(old.id) is None and await store.events_after(old.id, 0) == []
    assert await store.get(recent.id) is not None


async def test_listing_pages_newest_first_with_filters(store: Store) -> None:
    made = [new(session="a" if i % 2 else None) for i in range(5)]
    for n in made:
        await store.accept(n)
    page = await store.list_owned("ann", limit=3)
    assert [i.id for i in page] == [n.id for n in made[::-1][:3]]
    rest = await store.list_owned("ann", before_seq=page[-1].seq, limit=3)
    assert [i.id for i in rest] == [made[1].id, made[0].id]
    assert {i.id for i in await store.list_owned("ann", session_id="a")} == {made[1].id, made[3].id}
    assert await store.list_owned("ann", status=Status.ACTIVE) == []
    assert await store.count_queued() == 5


@pytest.mark.parametrize("stopping", [True, False])
async def test_release_makes_an_attempt_stale_at_once(store: Store, stopping: bool) -> None:
    """Handed back by a stopping worker (a deploy) or by one declared dead: stale at once
    either way; only the second's replacement is counted as a crash."""
    n = new()
    await store.accept(n)
    await store.claim(n.id, "w")
    await store.release(n.id, 1, stopping=stopping)
    [stale] = await store.stale_attempts(5)
    assert (stale.invocation_id, stale.handed_back, stale.crashes) == (n.id, stopping, 0)
    assert await store.requeue_for_recovery(n.id, 1, 5, 0, crash=not stale.handed_back)
    assert await store.claim(n.id, "w2") is not None
    await store.release(n.id, 2, stopping=True)
    [again] = await store.stale_attempts(5)
    assert (again.attempt, again.handed_back, again.crashes) == (2, True, 0 if stopping else 1)


async def test_a_stopping_workers_hand_back_leaves_a_verdict_of_dead_a_crash(store: Store) -> None:
    """Declared dead (0) while it stopped: its own hand-back after that does not turn the
    crash into a deploy."""
    n = new()
    await store.accept(n)
    await store.claim(n.id, "w")
    await store.release(n.id, 1, stopping=False)
    await store.release(n.id, 1, stopping=True)
    [stale] = await store.stale_attempts(5)
    assert stale.handed_back is False


async def test_a_late_beat_never_revives_a_handed_back_attempt(store: Store) -> None:
    """The heartbeat thread read its attempts before the hand-back and beats after it (or after
    another worker declared it dead): the row stays handed back, and the beat says superseded."""
    n = new()
    await store.accept(n)
    await store.claim(n.id, "w")
    await store.release(n.id, 1, stopping=True)
    assert await store.heartbeat([(n.id, 1)], claiming=True, worker="w") == {}
    assert [s.invocation_id for s in await store.stale_attempts(5)] == [n.id]


# -- batches: one result per item, in order; a single call is a batch of one ----------------


def test_no_read_of_an_invocation_fetches_its_input() -> None:
    """Status reads, lists and conflicts show no input: a large one (a long conversation) would
    cost every poll its bytes and their decoding. Only a claim reads it, for the attempt."""
    assert "input" not in {column.name for column in INVOCATION_COLUMNS}
    assert "input" in invocations.c


async def test_a_batch_of_accepts_answers_each_request_in_order(store: Store) -> None:
    a, b, c = new(), new(), new()
    other = NewInvocation(a.id, a.owner, None, 2, "other")
    results = await store.accept_many([a, b, a, other, c])
    assert [type(r).__name__ for r in results] == [
        "Accepted",
        "Accepted",
        "Accepted",
        "Conflict",
        "Accepted",
    ]
    created = [r.created for r in results if isinstance(r, Accepted)]
    assert created == [True, True, False, True]  # the repeat found the first one's row


async def test_the_owner_limit_holds_within_one_batch(store: Store) -> None:
    mine = [new() for _ in range(4)]
    results = await store.accept_many([*mine, new(owner="bob")], max_open_per_owner=2)
    assert [type(r).__name__ for r in results] == [
        "Accepted",
        "Accepted",
        "OwnerLimitReached",
        "OwnerLimitReached",
        "Accepted",
    ]
    assert {i.id for i in await store.list_owned("ann")} == {mine[0].id, mine[1].id}


async def test_a_batch_of_claims_wins_each_invocation_once(store: Store) -> None:
    a, b, head, next_in_session = new(), new(), new(session="s"), new(session="s")
    for n in (a, b, head, next_in_session):
        await store.accept(n)
    claims = await store.claim_many([a.id, b.id, a.id, head.id, next_in_session.id], "w")
    won = [c.invocation_id if isinstance(c, Claim) else c for c in claims]
    assert won == [a.id, b.id, None, head.id, None]


async def test_a_batch_of_appends_continues_each_log_and_fences_each_attempt(
    store: Store,
) -> None:
    a, b = await claimed(store, 2)
    tick = NewEvent("tick", {"type": "tick"})
    results = await store.append_many(
        [
            AppendRequest(a, 1, [tick]),
            AppendRequest(b, 1, [tick, tick]),
            AppendRequest(a, 1, [tick]),  # the same attempt again: the next transaction
            AppendRequest(b, 2, [tick]),  # not b's attempt
        ]
    )
    cursors = [[e.cursor for e in r] if isinstance(r, list) else r for r in results]
    assert cursors[:3] == [[2], [2, 3], [3]]
    assert isinstance(cursors[3], Superseded)


async def test_a_batch_of_finishes_ends_each_attempt_once(store: Store) -> None:
    a, b = await claimed(store, 2)
    pending = [NewEvent("last", {"type": "last"})]
    results = await store.finish_many(
        [
            FinishRequest(a, 1, completed("a")),
            FinishRequest(b, 1, failed(ErrorCode.INVOCATION_FAILED), pending),
            FinishRequest(a, 1, completed("again")),
        ]
    )
    assert isinstance(results[0], Finished) and isinstance(results[1], Finished)
    assert [e.type for e in results[1].events] == ["last", "run.failed"]
    assert isinstance(results[2], Superseded)
    done = await store.get(a)
    assert done is not None and done.output == "a"


async def test_the_reaper_ends_an_attempt_that_stopped_beating(store: Store) -> None:
    [n] = await claimed(store, 1)
    await age(store, n, "heartbeat_at", 60)
    finished = await store.finish(FinishRequest(n, 1, cancelled(), stale_after=5))
    assert [e.type for e in finished.events] == ["run.cancelled"]


async def test_a_grouped_write_skips_a_held_row_and_writes_it_once_free(store: Store) -> None:
    if store.dialect != "postgresql":
        pytest.skip("SQLite holds no row locks: a transaction holds the whole database")
    held, free = await claimed(store, 2)
    async with store.engine.connect() as blocker:
        transaction = await blocker.begin()
        await blocker.execute(
            sa.select(invocations.c.id).where(invocations.c.id == held).with_for_update()
        )
        both = asyncio.create_task(
            store.finish_many([FinishRequest(i, 1, completed(i)) for i in (held, free)])
        )
        await wait_for_status(store, free, Status.COMPLETED)  # not held up by the locked row
        assert not both.done()
        await transaction.rollback()
        results = await asyncio.wait_for(both, 10)
    assert all(isinstance(r, Finished) for r in results)
    done = await store.get(held)
    assert done is not None and done.status is Status.COMPLETED


async def wait_for_status(store: Store, invocation_id: str, status: Status) -> None:
    """Poll the database (another session's write wakes nothing here) with a deadline."""

    async def reached() -> None:
        while (got := await store.get(invocation_id)) is None or got.status is not status:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    await asyncio.wait_for(reached(), 10)
