"""One contract for both stores: accept, claim, fence, finish, sessions, reaper queries, and
the batched form of every verb."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from tether.errors import ErrorCode
from tether.events import RUN_COMPLETED, Event
from tether.jsonvalue import JsonText, encoded
from tether.outcomes import cancelled, completed, failed
from tether.store.errors import ValueRefused
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

EVERY_STORE = pytest.mark.parametrize("store", ["sqlite", "sqlite-text", "postgres"], indirect=True)
"""For tests of JSON values: also SQLite's batches as on a SQLite without ``->``."""


def new(
    owner: str = "ann", session: str | None = None, input: Any = 1, h: str = "h"
) -> NewInvocation:
    return NewInvocation(str(uuid.uuid4()), owner, session, input, h)


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


async def test_release_makes_an_attempt_stale_at_once(store: Store) -> None:
    n = new()
    await store.accept(n)
    await store.claim(n.id, "w")
    await store.release(n.id, 1)
    assert [s.invocation_id for s in await store.stale_attempts(5)] == [n.id]


async def test_a_late_beat_never_revives_a_handed_back_attempt(store: Store) -> None:
    """The heartbeat thread read its attempts before the hand-back and beats after it (or after
    another worker declared it dead): the row stays handed back, and the beat says superseded."""
    n = new()
    await store.accept(n)
    await store.claim(n.id, "w")
    await store.release(n.id, 1)
    assert await store.heartbeat([(n.id, 1)], claiming=True, worker="w") == {}
    assert [s.invocation_id for s in await store.stale_attempts(5)] == [n.id]


@EVERY_STORE
async def test_json_values_round_trip(store: Store) -> None:
    value = {"text": "héllo \\u0000 literal", "n": [1, 2.5, None, True], "nested": {"k": "v"}}
    n = new(input=value)
    await store.accept(n)
    claim = await store.claim(n.id, "w")  # the input's one reader: the attempt that runs it
    assert claim is not None and claim.input == value


# -- batches: one result per item, in order; a single call is a batch of one ----------------


def test_no_read_of_an_invocation_fetches_its_input() -> None:
    """Status reads, lists and conflicts show no input: a large one (a long conversation) would
    cost every poll its bytes and their decoding. Only a claim reads it, for the attempt."""
    assert "input" not in {column.name for column in INVOCATION_COLUMNS}
    assert "input" in invocations.c


async def test_null_input_is_a_json_value_the_store_keeps(store: Store) -> None:
    n = new(input=None)
    assert (await store.accept(n)).created
    assert not (await store.accept(n)).created  # the same request, not a conflict
    claim = await store.claim(n.id, "w")
    assert claim is not None and claim.input is None


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


@EVERY_STORE
async def test_a_batch_keeps_every_value_and_its_order(store: Store) -> None:
    """One batch holds inputs of every JSON kind, sessions and none, priorities and user
    auth; each row reads back as sent, and the queue order (``seq``) is the batch's order."""
    inputs: list[Any] = [
        None,
        "text \u00e9\u4e2d \U0001f600",
        {"a": [1, 2.5, True, None]},
        [],
        10**18,
        False,
        "null",
        encoded({"already": "encoded"}),
    ]
    batch = [
        NewInvocation(
            str(uuid.uuid4()),
            "ann",
            f"s{n}" if n % 2 else None,  # a session each: every one can be claimed at once
            value,
            f"h{n}",
            user_auth=n == 1,
            priority=n % 3,
        )
        for n, value in enumerate(inputs)
    ]
    results = await store.accept_many(batch)
    assert all(isinstance(r, Accepted) and r.created for r in results)
    read = [await store.get(n.id) for n in batch]
    assert [(i.session_id, i.request_hash) for i in read if i] == [
        (n.session_id, n.request_hash) for n in batch
    ]
    seqs = [i.seq for i in read if i]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(batch)
    claims = [await store.claim(n.id, "w") for n in batch]
    assert [c.input if c else "not claimed" for c in claims] == [n.input for n in batch]


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


async def claimed(store: Store, count: int) -> list[str]:
    made = [new() for _ in range(count)]
    for n in made:
        await store.accept(n)
        assert await store.claim(n.id, "w") is not None
    return [n.id for n in made]


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


EVERY_KIND: list[Any] = [
    *(None, "null", "", False, True, 0, -2.5, 10**18, 10**20, 1e16, 1e-7, -0.0, [], {}),
    *({"a": [None]}, 'q"uote \\ new\nline', "\u2028 \u00e9 \U0001f600"),
]
"""A JSON value of every kind, and the ones a careless carriage would turn into another (the
string ``"null"``, false, zero, empties, numbers past 64 bits or in exponent form, strings of
escapes and characters past ASCII)."""


@EVERY_STORE
async def test_a_batch_of_finishes_keeps_every_kind_of_output(store: Store) -> None:
    """Each output reads back as it was, with its text encoded already (as the runtime hands it)
    or not; None is no output either way (the column's SQL ``NULL``); the terminal event
    carries the value, stored from that text where there is one."""
    plain = await claimed(store, len(EVERY_KIND))
    ready = await claimed(store, len(EVERY_KIND))
    kinds = list(zip(plain + ready, EVERY_KIND * 2, strict=True))
    results = await store.finish_many(
        [FinishRequest(i, 1, completed(v, encoded(v) if i in ready else None)) for i, v in kinds]
    )
    assert all(isinstance(r, Finished) for r in results)
    assert [r.events[-1].data["output"] for r in results if isinstance(r, Finished)] == [
        v for _, v in kinds
    ]
    texts = [r.events[-1].text for r in results if isinstance(r, Finished)]
    assert [t is not None for t in texts] == [i in ready for i, _ in kinds]  # stored as it is
    for ids in (plain, ready):
        outputs = [(await store.get(i)) for i in ids]
        assert [o.output if o else "gone" for o in outputs] == EVERY_KIND
        events = [(await store.events_after(i, 1))[-1] for i in ids]
        assert [(e.type, e.data["output"]) for e in events] == [
            (RUN_COMPLETED, v) for v in EVERY_KIND
        ]
    async with store.engine.connect() as conn:
        nulls = await conn.scalar(
            sa.select(sa.func.count())
            .select_from(invocations)
            .where(invocations.c.id.in_(plain + ready), invocations.c.output.is_(None))
        )
    assert nulls == 2  # None alone, plain and encoded


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_an_output_sqlite_cannot_parse_fails_its_finish_alone(store: Store) -> None:
    """SQLite's JSON functions parse a batch's values (``->``) to a depth of 1,000 (2,000 before
    3.45), which Python encodes from 3.12: that finish is refused as a value, the rest of its
    batch is written."""
    deep, fine = await claimed(store, 2)
    too_deep = JsonText("[" * 2100 + "]" * 2100)
    results = await store.finish_many(
        [FinishRequest(deep, 1, completed([], too_deep)), FinishRequest(fine, 1, completed(1))]
    )
    assert isinstance(results[0], ValueRefused) and isinstance(results[1], Finished)
    found = await store.get(fine)
    assert found is not None and found.output == 1


@EVERY_STORE
async def test_a_batch_of_appends_keeps_every_kind_of_event_data(store: Store) -> None:
    (a,) = await claimed(store, 1)
    data = [*EVERY_KIND, encoded({"k": "v"}), encoded(None)]
    appended = await store.append(AppendRequest(a, 1, [NewEvent("d", v) for v in data]))
    stored = await store.events_after(a, appended[0].cursor - 1)
    assert [e.data for e in stored] == [*EVERY_KIND, {"k": "v"}, None]


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
