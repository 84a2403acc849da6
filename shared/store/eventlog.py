"""The event log: how an invocation's events get their cursors, written once for every writer.

A write advances the row's ``last_event_id`` by the number of events it appends (under the
writer's fence, in the same statement) and the events take the cursors up to the new value, so
the log continues across attempts with no gap and no duplicate.

A completed run's terminal event is stored without its output, which the invocation's row holds
already (the ending writes both in one statement's transaction): a large output is stored, parsed
and compressed once, not twice. Every read of the log puts it back from the row
(:func:`restored`), so a reader gets the event as it was published.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from tether.events import RUN_COMPLETED, Event
from tether.store.bound import BoundBatch
from tether.store.connection import Connection
from tether.store.dialect import Dialect
from tether.store.schema import JsonValue, events, invocations
from tether.store.writes import NewEvent

EVENT_ROWS = BoundBatch(
    "event_rows",
    (
        sa.column("invocation_id", sa.Text),
        sa.column("cursor", sa.BigInteger),
        sa.column("type", sa.Text),
        sa.column("data", JsonValue),
    ),
)


def advanced(count: int | sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """``last_event_id`` moved past ``count`` new events (a number or a column)."""
    return invocations.c.last_event_id + count


def numbered(last_event_id: int, new: Sequence[NewEvent]) -> list[Event]:
    """The events of a write that advanced the log to ``last_event_id``, with their cursors."""
    first = last_event_id - len(new) + 1
    return [Event(first + i, event.type, event.data, event.text) for i, event in enumerate(new)]


async def insert_events(
    conn: Connection, dialect: Dialect, logged: Mapping[str, Sequence[Event]]
) -> None:
    """Store numbered events, by invocation id, in one statement whose text is the same for
    every batch (:class:`.bound.BoundBatch`)."""
    rows = [
        (invocation_id, e.cursor, e.type, _stored_data(e))
        for invocation_id, batch in logged.items()
        for e in batch
    ]
    if rows:
        await conn.execute(
            _insert_statement(dialect), EVENT_ROWS.params(rows, carriage=dialect.carriage)
        )


def _stored_data(event: Event) -> Any:
    """What an event's row holds: its data, a ``run.completed``'s without the output (only an
    ending writes one: a handler's event may not take a ``run.`` type, ``user_event_type``).
    An event's :attr:`~tether.events.Event.text` is for its publish alone: only a completed
    run's has one, and its row leaves the output out."""
    if event.type == RUN_COMPLETED and isinstance(event.data, dict):
        return {key: value for key, value in event.data.items() if key != "output"}
    return event.data


def restored(event_type: str, data: Any, output: Any) -> Any:
    """A stored event's payload as it was published: a ``run.completed`` row's with the output
    of its invocation's row (``output``) put back. A row stored with its output (before
    2026-12-07) keeps its own."""
    if event_type == RUN_COMPLETED and isinstance(data, dict) and "output" not in data:
        return {**data, "output": output}
    return data


def output_of_completion(
    event_type: sa.ColumnElement[str], output: sa.ColumnElement[Any]
) -> sa.ColumnElement[Any]:
    """The column a read of the log selects beside each event for :func:`restored`: the
    invocation's ``output`` for a ``run.completed`` row (read only for those), NULL for others."""
    return sa.case((event_type == RUN_COMPLETED, output)).label("completed_output")


@functools.cache
def _insert_statement(dialect: Dialect) -> sa.Insert:
    rows = EVENT_ROWS.cte(dialect.carriage)
    source = sa.select(
        rows.c.invocation_id,
        rows.c.cursor,
        rows.c.type,
        rows.c.data,
        dialect.now,
    )
    names = ["invocation_id", "cursor", "type", "data", "created_at"]
    return events.insert().from_select(names, source)
