"""A completed run's output is stored once, in the invocation's row: its ``run.completed`` event's
row holds no copy, and every read of the log (``events_after``, ``read_streams``) gives the event
back as it was published, its output from the row."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from tests.store.rows import claimed
from tests.store.test_json_values_contract import EVERY_KIND, EVERY_STORE
from tether.errors import ErrorCode
from tether.events import RUN_COMPLETED, RUN_FAILED, Event
from tether.jsonvalue import encoded
from tether.outcomes import completed, failed
from tether.store.schema import events
from tether.store.store import (
    AppendRequest,
    Finished,
    FinishRequest,
    NewEvent,
    Store,
    StreamRead,
)


async def stored_rows(store: Store, invocation_id: str) -> list[tuple[str, Any]]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(events.c.type, events.c.data)
            .where(events.c.invocation_id == invocation_id)
            .order_by(events.c.cursor)
        )
        return [(r.type, r.data) for r in rows]


async def both_reads(store: Store, invocation_id: str, after: int) -> tuple[Event, ...]:
    """The events after ``after`` as ``events_after`` gives them and as ``read_streams`` does,
    alone and in one statement with another invocation's read (asserted equal)."""
    logged = await store.events_after(invocation_id, after)
    [page] = await store.read_streams([StreamRead(invocation_id, after, 100)])
    assert page is not None and page.events == logged
    (other,) = await claimed(store, 1)
    pages = await store.read_streams(
        [StreamRead(other, 0, 100), StreamRead(invocation_id, after, 100)]
    )
    assert pages[1] is not None and pages[1].events == logged
    return tuple(logged)


@EVERY_STORE
async def test_the_terminal_events_row_holds_no_output_and_reads_give_it_back(
    store: Store,
) -> None:
    """Every kind of output, encoded already (as the runtime hands it) or not; the stream's read
    runs many times, so through the store's compiled plan too, some of them on pages with no
    ``run.completed``."""
    plain = await claimed(store, len(EVERY_KIND))
    ready = await claimed(store, len(EVERY_KIND))
    ids = plain + ready
    for invocation_id in ids:  # pages with no run.completed
        assert [e.type for e in await both_reads(store, invocation_id, 0)] == ["run.started"]
    outputs = EVERY_KIND * 2
    results = await store.finish_many(
        [
            FinishRequest(i, 1, completed(v, encoded(v) if i in ready else None))
            for i, v in zip(ids, outputs, strict=True)
        ]
    )
    assert all(isinstance(r, Finished) for r in results)
    for invocation_id, output in zip(ids, outputs, strict=True):
        assert (await stored_rows(store, invocation_id))[-1] == (
            RUN_COMPLETED,
            {"type": RUN_COMPLETED},
        )
        for after in (0, 1):
            last = (await both_reads(store, invocation_id, after))[-1]
            assert (last.type, last.data) == (
                RUN_COMPLETED,
                {"type": RUN_COMPLETED, "output": output},
            )


@EVERY_STORE
async def test_other_events_are_stored_and_read_as_written(store: Store) -> None:
    """A failed run's terminal event keeps its error; an event a handler emits keeps an
    ``output`` key of its own."""
    (a,) = await claimed(store, 1)
    emitted = NewEvent("step", {"type": "step", "output": "mine"})
    await store.append(AppendRequest(a, 1, [emitted]))
    [done] = await store.finish_many([FinishRequest(a, 1, failed(ErrorCode.INVOCATION_FAILED))])
    assert isinstance(done, Finished)
    rows = await stored_rows(store, a)
    assert rows[1:] == [("step", emitted.data), (RUN_FAILED, done.events[-1].data)]
    read = await both_reads(store, a, 1)
    assert [(e.type, e.data) for e in read] == rows[1:]


@pytest.mark.parametrize("store", ["sqlite", "postgres"], indirect=True)
async def test_a_terminal_event_stored_with_its_output_keeps_its_own(store: Store) -> None:
    """Rows written before the output was stored once hold a copy: a read gives that copy."""
    (a,) = await claimed(store, 1)
    [done] = await store.finish_many([FinishRequest(a, 1, completed({"v": 1}))])
    assert isinstance(done, Finished)
    cursor = done.events[-1].cursor
    async with store.engine.begin() as conn:
        await conn.execute(
            sa.update(events)
            .where(events.c.invocation_id == a, events.c.cursor == cursor)
            .values(data={"type": RUN_COMPLETED, "output": {"v": "as stored"}})
        )
    last = (await both_reads(store, a, 1))[-1]
    assert last.data == {"type": RUN_COMPLETED, "output": {"v": "as stored"}}
