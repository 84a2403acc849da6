"""A stream's one read (``Store.read_streams``) says exactly what the three reads it replaces
said: the invocation's owner and status (``get``), its events after the cursor
(``events_after``) and its last cursor, for many streams in one statement."""

from __future__ import annotations

import uuid

from tether.outcomes import completed
from tether.store.schema import NewInvocation, Status
from tether.store.store import (
    AppendRequest,
    FinishRequest,
    NewEvent,
    Store,
    StreamPage,
    StreamRead,
)


async def started(store: Store, owner: str, emitted: int) -> str:
    """An active invocation of ``owner`` with ``emitted`` events after ``run.started``."""
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, owner, None, 1, "h"))
    claim = await store.claim(invocation_id, "w")
    assert claim is not None
    if emitted:
        ticks = [NewEvent("tick", {"type": "tick", "i": i}) for i in range(emitted)]
        await store.append(AppendRequest(invocation_id, claim.attempt, ticks))
    return invocation_id


async def three_reads(store: Store, read: StreamRead) -> StreamPage | None:
    """What a stream learned before: ``get``, then ``events_after``."""
    invocation = await store.get(read.invocation_id)
    if invocation is None:
        return None
    events = await store.events_after(read.invocation_id, read.after, read.limit)
    return StreamPage(
        invocation.owner, invocation.status, invocation.last_event_id, invocation.seq, events
    )


async def test_one_read_per_stream_says_what_get_and_events_after_said(store: Store) -> None:
    live = await started(store, "ann", 30)
    done = await started(store, "bob", 5)
    await store.finish(FinishRequest(done, 1, completed({"ok": True}), []))
    queued = str(uuid.uuid4())
    await store.accept(NewInvocation(queued, "cy", None, 1, "h"))
    reads = [
        StreamRead(live, 0, 16),
        StreamRead(live, 10, 5),
        StreamRead(live, 29, 1000),
        StreamRead(live, 31, 16),  # past the end: no events
        StreamRead(live, 500, 16),
        StreamRead(done, 0, 1000),
        StreamRead(done, 6, 16),
        StreamRead(queued, 0, 16),
        StreamRead(str(uuid.uuid4()), 0, 16),  # no such invocation
        StreamRead(live, 0, 1),
    ]
    pages = await store.read_streams(reads)
    assert pages == [await three_reads(store, read) for read in reads]
    assert [len(p.events) if p else None for p in pages] == [16, 5, 2, 0, 0, 7, 1, 0, None, 1]


async def test_a_page_tells_whether_the_stream_is_over_or_has_more(store: Store) -> None:
    live = await started(store, "ann", 3)  # cursors 1..4
    done = await started(store, "ann", 3)
    await store.finish(FinishRequest(done, 1, completed(None), []))  # run.completed is 5
    [first, whole, rest] = await store.read_streams(
        [StreamRead(live, 0, 2), StreamRead(done, 0, 1000), StreamRead(done, 3, 1000)]
    )
    assert first is not None and whole is not None and rest is not None
    assert first.status is Status.ACTIVE and first.has_more(2) and not first.ends_stream(4)
    assert whole.status is Status.COMPLETED and whole.events[-1].type == "run.completed"
    assert whole.ends_stream(whole.events[-1].cursor) and not whole.ends_stream(4)
    assert rest.events == whole.events[3:]


async def test_no_reads_is_no_query(store: Store) -> None:
    assert await store.read_streams([]) == []


async def test_a_read_of_no_events_says_the_facts_and_a_reused_id_is_another_row(
    store: Store,
) -> None:
    done = await started(store, "ann", 3)
    await store.finish(FinishRequest(done, 1, completed(None), []))
    [facts] = await store.read_streams([StreamRead(done, 2, 0)])
    assert facts is not None and facts.events == [] and facts.last_event_id == 5
    assert (facts.owner, facts.status) == ("ann", Status.COMPLETED)
    await store.delete_expired(retention=-1)
    await store.accept(NewInvocation(done, "bob", None, 1, "h"))
    [again] = await store.read_streams([StreamRead(done, 0, 0)])
    assert again is not None and again.owner == "bob" and again.seq != facts.seq
