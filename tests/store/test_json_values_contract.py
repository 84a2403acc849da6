"""JSON values of every kind through both stores and every carriage of their batches
(``tether.store.bound``): inputs, outputs and event data read back as they were sent, encoded
already or not."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from tests.store.rows import claimed, new
from tether.events import RUN_COMPLETED
from tether.jsonvalue import JsonText, as_stored, encoded
from tether.outcomes import completed
from tether.store.errors import ValueRefused
from tether.store.schema import NewInvocation, invocations
from tether.store.store import Accepted, AppendRequest, Finished, FinishRequest, NewEvent, Store

EVERY_STORE = pytest.mark.parametrize("store", ["sqlite", "sqlite-text", "postgres"], indirect=True)
"""Also SQLite's batches as on a SQLite without ``->`` (a JSON value as a string of its text)."""


@EVERY_STORE
async def test_json_values_round_trip(store: Store) -> None:
    value = {"text": "héllo \\u0000 literal", "n": [1, 2.5, None, True], "nested": {"k": "v"}}
    n = new(input=value)
    await store.accept(n)
    claim = await store.claim(n.id, "w")  # the input's one reader: the attempt that runs it
    assert claim is not None and claim.input == value


async def test_null_input_is_a_json_value_the_store_keeps(store: Store) -> None:
    n = new(input=None)
    assert (await store.accept(n)).created
    assert not (await store.accept(n)).created  # the same request, not a conflict
    claim = await store.claim(n.id, "w")
    assert claim is not None and claim.input is None


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
    carries the value, published with that text where there is one and read back with the
    row's."""
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
    assert [t is not None for t in texts] == [i in ready for i, _ in kinds]  # published so
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


@EVERY_STORE
async def test_a_large_value_round_trips_through_input_output_and_event(store: Store) -> None:
    """Past the ~2 kB where PostgreSQL compresses a value (with lz4 where it has it: migration
    0013): a conversation as the input, the output and the terminal event."""
    value = {
        "messages": [{"role": "user", "content": f"message {n} " + "x" * 300} for n in range(120)]
    }
    n = new(input=value)
    await store.accept(n)
    claim = await store.claim(n.id, "w")
    assert claim is not None and claim.input == value
    [done] = await store.finish_many([FinishRequest(n.id, 1, completed(value, encoded(value)))])
    assert isinstance(done, Finished)
    found = await store.get(n.id)
    assert found is not None and found.output == value
    assert (await store.events_after(n.id, 1))[-1].data == {"type": RUN_COMPLETED, "output": value}


NUMBERS: list[Any] = [1e308, 1.5e300, 1e16, -0.0, 5e-324, 1e-7, 0.1, 2**63, -(2**63) - 1, 10**30]
"""Numbers that PostgreSQL's ``jsonb`` keeps by value, not by spelling: a float Python writes
with a positive exponent comes back an integer, ``-0.0`` as ``0.0``."""


def typed(values: list[Any]) -> list[tuple[type, Any]]:
    return [(type(v), v) for v in values]


@EVERY_STORE
async def test_numbers_come_back_alike_from_either_store(store: Store) -> None:
    """``tether dev`` gives an input, an output and an event's data back as a PostgreSQL
    deployment does (docs/durable.md says so of a step's result): ``1e308`` an ``int`` in both,
    not a ``float`` from SQLite alone."""
    expected = typed([as_stored(v) for v in NUMBERS])
    assert expected[0] == (int, 10**308) and expected[3] == (float, 0.0)
    made = [new(input=v) for v in NUMBERS]
    for n in made:
        await store.accept(n)
    claims = [await store.claim(n.id, "w") for n in made]
    assert typed([c.input if c else "not claimed" for c in claims]) == expected
    ids = [n.id for n in made]
    finishes = [FinishRequest(i, 1, completed(v)) for i, v in zip(ids, NUMBERS, strict=True)]
    await store.finish_many(finishes)
    outputs = [await store.get(i) for i in ids]
    assert typed([o.output if o else "gone" for o in outputs]) == expected
    (a,) = await claimed(store, 1)
    appended = await store.append(AppendRequest(a, 1, [NewEvent("d", v) for v in NUMBERS]))
    stored = await store.events_after(a, appended[0].cursor - 1)
    assert typed([e.data for e in stored]) == expected
