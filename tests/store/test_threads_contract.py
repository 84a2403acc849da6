"""Agent threads (spec §4.10) on SQLite and PostgreSQL alike: an invocation's messages kept once
per position, the history an invocation sees leaving out its own, and a thread deleted while a
turn runs, or while turns are queued in its session, staying deleted, even when the delete and a
turn's write race on PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import sqlalchemy as sa

from tests.store.rows import new, until_a_lock_wait
from tests.store.test_store_contract import age
from tether.outcomes import completed
from tether.store.schema import forgotten_turns, thread_messages
from tether.store.store import FinishRequest, Store

KEEP = 200


async def messages_of(store: Store, thread_id: str) -> int:
    query = (
        sa.select(sa.func.count())
        .select_from(thread_messages)
        .where(thread_messages.c.thread_id == thread_id)
    )
    async with store.engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


async def test_an_invocations_messages_are_kept_once_per_position(store: Store) -> None:
    thread = str(uuid.uuid4())
    for _ in range(2):  # a replacement attempt writes the same again: nothing changes
        assert await store.threads.append("alice", thread, "inv-1", [("user", "hi")], KEEP)
    answered = [("assistant", "hello")]
    for _ in range(2):
        assert await store.threads.append(
            "alice", thread, "inv-1", answered, KEEP, start=1, create=False
        )
    assert await store.threads.append(
        "alice", thread, "inv-1", [("assistant", "another")], KEEP, start=1, create=False
    )
    record = await store.threads.get("alice", thread, KEEP)
    assert record is not None
    assert [(m.role, m.content) for m in record.messages] == [
        ("user", "hi"),
        ("assistant", "hello"),
    ]


async def test_the_history_before_an_invocation_leaves_out_its_own_messages(
    store: Store,
) -> None:
    thread = str(uuid.uuid4())
    await store.threads.append("alice", thread, "inv-1", [("user", "a"), ("assistant", "A")], KEEP)
    await store.threads.append("alice", thread, "inv-2", [("user", "b")], KEEP)
    earlier = await store.threads.recent("alice", thread, KEEP, before="inv-2")
    assert [m.content for m in earlier] == ["a", "A"]
    everything = await store.threads.recent("alice", thread, KEEP)
    assert [m.content for m in everything] == ["a", "A", "b"]
    assert await store.threads.recent("bob", thread, KEEP) == []  # another owner's: none


async def test_an_append_that_may_not_create_leaves_a_deleted_thread_deleted(
    store: Store,
) -> None:
    thread = str(uuid.uuid4())
    await store.threads.append("alice", thread, "inv-1", [("user", "hi")], KEEP)
    assert await store.threads.delete("alice", thread)
    answered = [("assistant", "hello")]
    assert not await store.threads.append(
        "alice", thread, "inv-1", answered, KEEP, start=1, create=False
    )
    assert await store.threads.get("alice", thread, KEEP) is None
    assert await messages_of(store, thread) == 0
    assert not await store.threads.append(
        "alice", str(uuid.uuid4()), "inv-2", answered, KEEP, create=False
    )  # never created: the same
    # an append that may create (a new turn of that session) starts the thread again
    assert await store.threads.append("alice", thread, "inv-3", [("user", "again")], KEEP)
    record = await store.threads.get("alice", thread, KEEP)
    assert record is not None and [m.content for m in record.messages] == ["again"]


async def test_a_thread_keeps_its_newest_messages(store: Store) -> None:
    thread = str(uuid.uuid4())
    for n in range(4):
        await store.threads.append("alice", thread, f"inv-{n}", [("user", str(n))], 3)
    answered = [("assistant", "4")]
    await store.threads.append("alice", thread, "inv-3", answered, 3, start=1, create=False)
    record = await store.threads.get("alice", thread, 10)
    assert record is not None and [m.content for m in record.messages] == ["2", "3", "4"]


async def forgotten(store: Store, *invocation_ids: str) -> set[str]:
    """Which of ``invocation_ids`` a delete forgot."""
    mark = forgotten_turns.c.invocation_id
    async with store.engine.connect() as conn:
        query = sa.select(mark).where(mark.in_(invocation_ids))
        return set((await conn.execute(query)).scalars())


async def test_turns_open_when_their_thread_is_deleted_never_write_to_it_again(
    store: Store,
) -> None:
    """A user's delete forgets the session's open turns: the running one's answer, a replayed
    user message, and a queued turn's first write (which may create the thread) write nothing;
    a turn accepted after the delete starts the thread again, and its ``ensure`` creates it."""
    thread = str(uuid.uuid4())
    running, queued, elsewhere = new("alice", thread), new("alice", thread), new("alice", "other")
    for invocation in (running, queued, elsewhere):
        await store.accept(invocation)
    await store.threads.ensure("alice", thread, running.id)
    assert await store.threads.append("alice", thread, running.id, [("user", "hi")], KEEP)
    assert await store.threads.delete("alice", thread)
    assert await forgotten(store, running.id, queued.id, elsewhere.id) == {running.id, queued.id}
    answered = [("assistant", "hello")]
    assert not await store.threads.append("alice", thread, running.id, [("user", "hi")], KEEP)
    assert not await store.threads.append("alice", thread, running.id, answered, KEEP, start=1)
    await store.threads.ensure("alice", thread, queued.id)
    assert not await store.threads.append("alice", thread, queued.id, [("user", "next")], KEEP)
    assert await store.threads.get("alice", thread, KEEP) is None
    assert await messages_of(store, thread) == 0

    later = new("alice", thread)
    await store.accept(later)
    await store.threads.ensure("alice", thread, later.id)
    assert await store.threads.exists("alice", thread)
    assert await store.threads.append("alice", thread, later.id, [("user", "anew")], KEEP)
    # the thread is back, but a forgotten turn still writes nothing to it
    assert not await store.threads.append("alice", thread, queued.id, [("user", "next")], KEEP)
    record = await store.threads.get("alice", thread, KEEP)
    assert record is not None and [m.content for m in record.messages] == ["anew"]


async def test_a_run_deleting_its_own_thread_forgets_no_turn(store: Store) -> None:
    """``forget_open=False`` (``ctx.thread.delete()``, an ephemeral agent's): the thread goes,
    and the session's turns, this one included, may start it again."""
    thread = str(uuid.uuid4())
    running = new("alice", thread)
    await store.accept(running)
    assert await store.threads.append("alice", thread, running.id, [("user", "hi")], KEEP)
    assert await store.threads.delete("alice", thread, forget_open=False)
    assert await forgotten(store, running.id) == set()
    assert await store.threads.append("alice", thread, running.id, [("user", "hi")], KEEP)


async def test_retention_takes_a_forgotten_turns_mark_with_it(store: Store) -> None:
    thread = str(uuid.uuid4())
    turn = new("alice", thread)
    await store.accept(turn)
    await store.threads.ensure("alice", thread, turn.id)
    assert await store.threads.delete("alice", thread)
    await store.claim(turn.id, "w")
    await store.finish(FinishRequest(turn.id, 1, completed(1)))
    await age(store, turn.id, "finished_at", 3600)
    assert await forgotten(store, turn.id) == {turn.id}
    assert (await store.delete_expired(600)).invocations >= 1
    assert await store.get(turn.id) is None and await forgotten(store, turn.id) == set()


async def test_an_id_reused_after_retention_writes_its_own_turn(store: Store) -> None:
    """Retention deletes an invocation but its thread keeps the turn's messages; the id is free
    again (another row). A turn accepted under it later, by its owner in the same thread or by
    another owner anywhere, writes its messages and sees the old turn as history: the old ones
    do not hold its ``(invocation_id, position)`` keys."""
    mine, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    again, taken = new("alice", mine), new("alice", mine)
    for turn in (again, taken):
        await store.accept(turn)
        assert await store.threads.append("alice", mine, turn.id, [("user", "old")], KEEP)
        await store.claim(turn.id, "w")
        await store.finish(FinishRequest(turn.id, 1, completed(1)))
        await age(store, turn.id, "finished_at", 3600)
    assert (await store.delete_expired(600)).invocations >= 2
    assert await store.get(again.id) is None and await store.get(taken.id) is None
    assert await store.threads.append("bob", theirs, taken.id, [("user", "bob's")], KEEP)
    assert [m.content for m in await store.threads.recent("bob", theirs, KEEP)] == ["bob's"]
    assert await store.threads.append("alice", mine, again.id, [("user", "new")], KEEP)
    earlier = await store.threads.recent("alice", mine, KEEP, before=again.id)
    assert [m.content for m in earlier] == ["old", "old"]
    everything = await store.threads.recent("alice", mine, KEEP)
    assert [m.content for m in everything] == ["old", "old", "new"]


async def test_an_id_that_expires_twice_keeps_both_turns_and_retention_goes_on(
    store: Store,
) -> None:
    """The second expiry of a reused id renamed its messages to the first's retired name: a
    unique violation that rolled back every retention pass from then on."""
    thread = str(uuid.uuid4())
    turn = new("alice", thread)
    for word in ("first", "second"):
        await store.accept(turn)
        assert await store.threads.append("alice", thread, turn.id, [("user", word)], KEEP)
        await store.claim(turn.id, "w")
        await store.finish(FinishRequest(turn.id, 1, completed(1)))
        await age(store, turn.id, "finished_at", 3600)
        assert (await store.delete_expired(600)).invocations >= 1
        assert await store.get(turn.id) is None
    kept = await store.threads.recent("alice", thread, KEEP)
    assert [m.content for m in kept] == ["first", "second"]


def dsn_of(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


async def test_an_answer_waiting_behind_a_delete_writes_nothing(
    pg_store: Store, migrated_pg: str
) -> None:
    """PostgreSQL: the delete holds the thread's row; the answer that waits for it finds the
    thread gone and writes no message without its thread."""
    store, thread = pg_store, str(uuid.uuid4())
    await store.threads.append("alice", thread, "inv-1", [("user", "hi")], KEEP)
    async with await psycopg.AsyncConnection.connect(dsn_of(migrated_pg)) as deleting:
        await deleting.execute(
            "DELETE FROM tether_threads WHERE owner = 'alice' AND id = %s", [thread]
        )
        answer = asyncio.create_task(
            store.threads.append(
                "alice", thread, "inv-1", [("assistant", "hello")], KEEP, start=1, create=False
            )
        )
        async with await psycopg.AsyncConnection.connect(
            dsn_of(migrated_pg), autocommit=True
        ) as watch:
            await until_a_lock_wait(watch)
        await deleting.execute(
            "DELETE FROM tether_thread_messages WHERE owner = 'alice' AND thread_id = %s",
            [thread],
        )
        await deleting.commit()
        assert not await asyncio.wait_for(answer, 10)
    assert await messages_of(store, thread) == 0


async def test_a_delete_waiting_behind_an_answer_takes_its_message_too(
    pg_store: Store, migrated_pg: str
) -> None:
    """PostgreSQL: an answer being written holds the thread's row; the delete waits for it and
    then deletes what it wrote as well (the thread's row first, its messages after)."""
    store, thread = pg_store, str(uuid.uuid4())
    await store.threads.append("alice", thread, "inv-1", [("user", "hi")], KEEP)
    async with await psycopg.AsyncConnection.connect(dsn_of(migrated_pg)) as answering:
        await answering.execute(
            "UPDATE tether_threads SET updated_at = updated_at WHERE owner = 'alice' AND id = %s",
            [thread],
        )
        await answering.execute(
            "INSERT INTO tether_thread_messages "
            "(owner, thread_id, invocation_id, position, role, content, created_at) "
            "VALUES ('alice', %s, 'inv-1', 1, 'assistant', 'hello', 0)",
            [thread],
        )
        deleting = asyncio.create_task(store.threads.delete("alice", thread))
        async with await psycopg.AsyncConnection.connect(
            dsn_of(migrated_pg), autocommit=True
        ) as watch:
            await until_a_lock_wait(watch)
        await answering.commit()
        assert await asyncio.wait_for(deleting, 10)
    assert await messages_of(store, thread) == 0


async def test_a_first_write_waiting_behind_a_delete_sees_its_mark(
    pg_store: Store, migrated_pg: str
) -> None:
    """PostgreSQL: a queued turn's first write (which may create the thread) waits on the row
    a delete holds; once the delete commits, the write inserts the thread anew, then reads the
    delete's mark and rolls back: no thread, no message."""
    store, thread = pg_store, str(uuid.uuid4())
    turn = new("alice", thread)
    await store.accept(turn)
    await store.threads.ensure("alice", thread, turn.id)
    async with await psycopg.AsyncConnection.connect(dsn_of(migrated_pg)) as deleting:
        await deleting.execute(
            "DELETE FROM tether_threads WHERE owner = 'alice' AND id = %s", [thread]
        )
        await deleting.execute(
            "INSERT INTO tether_forgotten_turns (invocation_id) VALUES (%s)", [turn.id]
        )
        asking = asyncio.create_task(
            store.threads.append("alice", thread, turn.id, [("user", "hi")], KEEP)
        )
        async with await psycopg.AsyncConnection.connect(
            dsn_of(migrated_pg), autocommit=True
        ) as watch:
            await until_a_lock_wait(watch)
        await deleting.commit()
        assert not await asyncio.wait_for(asking, 10)
    assert not await store.threads.exists("alice", thread)
    assert await messages_of(store, thread) == 0
