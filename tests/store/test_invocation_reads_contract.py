"""Reads of single invocations by id, batched per gateway process
(``tether.gateway.invocation_reads`` over ``Store.get_many``): each read says what ``get``
says at the time it was asked, and reads that arrive together share a statement."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from tether.gateway.invocation_reads import IN_FLIGHT, InvocationReads
from tether.outcomes import completed
from tether.store.schema import NewInvocation, Status
from tether.store.store import FinishRequest, Store


async def accepted(store: Store, owner: str = "ann") -> str:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, owner, None, {"n": 1}, "h"))
    return invocation_id


async def test_get_many_answers_each_id_in_order_as_get_does(store: Store) -> None:
    ids = [await accepted(store, f"o{n}") for n in range(5)]
    claim = await store.claim(ids[2], "w")
    assert claim is not None
    await store.finish(FinishRequest(ids[2], claim.attempt, completed({"ok": 1}), []))
    missing = str(uuid.uuid4())
    asked = [ids[3], missing, ids[0], ids[2], ids[3], "", ids[4], ids[1], ids[2]]
    got = await store.get_many(asked)
    assert got == [await store.get(i) for i in asked]
    assert got[1] is None and got[5] is None
    assert got[3] is not None and got[3].status is Status.COMPLETED
    assert await store.get_many([]) == []
    for count in (1, 2, 3, 7, 9):
        got = await store.get_many((ids * 2)[:count])
        assert [g.id if g else None for g in got] == (ids * 2)[:count]


async def test_reads_that_arrive_together_share_a_statement_and_see_what_was_committed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [await accepted(store) for _ in range(40)]
    statements: list[int] = []
    get_many = store.get_many

    async def counting(invocation_ids: Sequence[str]) -> Any:
        statements.append(len(invocation_ids))
        return await get_many(invocation_ids)

    monkeypatch.setattr(store, "get_many", counting)
    reads = InvocationReads(store)
    lone = await reads.get(ids[0])
    assert lone is not None and lone.id == ids[0] and statements == [1]
    got = await asyncio.gather(*(reads.get(i) for i in ids * 3))
    assert [g.id if g else None for g in got] == ids * 3
    assert sum(statements[1:]) == 120 and len(statements) - 1 < 120 // 4
    claim = await store.claim(ids[5], "w")
    assert claim is not None
    now = await reads.get(ids[5])  # asked after the claim committed: sees it
    assert now is not None and now.status is Status.ACTIVE
    assert await reads.get(str(uuid.uuid4())) is None


async def test_reads_that_arrive_while_statements_run_wait_and_go_together(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most ``IN_FLIGHT`` statements at a time per process: every read that arrives while
    they run joins the next one, whatever their number."""
    ids = [await accepted(store) for _ in range(20)]
    statements: list[int] = []
    began, release = asyncio.Event(), asyncio.Event()
    get_many = store.get_many

    async def held(invocation_ids: Sequence[str]) -> Any:
        statements.append(len(invocation_ids))
        if len(statements) <= IN_FLIGHT:
            began.set()
            await release.wait()
        return await get_many(invocation_ids)

    monkeypatch.setattr(store, "get_many", held)
    reads = InvocationReads(store)
    first = []
    for invocation_id in ids[:IN_FLIGHT]:  # each its own statement, held until released
        began.clear()
        first.append(asyncio.ensure_future(reads.get(invocation_id)))
        await asyncio.wait_for(began.wait(), 10)
    later = [asyncio.ensure_future(reads.get(i)) for i in ids[IN_FLIGHT:]]
    for _ in range(5):
        await asyncio.sleep(0)
    assert statements == [1] * IN_FLIGHT  # the others wait for the statements in flight
    release.set()
    got = await asyncio.gather(*first, *later)
    assert [g.id if g else None for g in got] == ids
    assert statements == [1] * IN_FLIGHT + [20 - IN_FLIGHT]
