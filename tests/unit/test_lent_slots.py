"""Reserved slots lent to the tokens' claim about to run (:meth:`NewcomerClaims.lending`): it
starts tenants with nothing running in them, in its own transaction, instead of a reserved
slots' claim beside it; an announcement meanwhile waits for it only when more tenants with
nothing running wait than there are reserved slots."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from tether.store.schema import Claim
from tether.store.store import Store
from tether.worker.newcomers import NewcomerClaims
from tether.worker.refills import FreedSlots
from tether.worker.slots import Slots


def test_only_a_claim_that_keeps_no_token_out_takes_the_reserved_slots() -> None:
    slots = Slots(4, reserve=2)
    assert slots.try_take()
    assert slots.take_reserved(5) == 0  # an unreserved slot is free: tokens may want it
    assert slots.try_take()
    assert slots.take_reserved(1) == 1
    assert slots.take_reserved(5) == 1
    assert slots.free == 0


def claim(invocation_id: str, tenant: str) -> Claim:
    return Claim(invocation_id, 1, {}, None, None, 1, tenant=tenant)


class LendingStore:
    """Records every claim; a tokens' claim returns ``won`` (up to what it may start) once
    ``tokens_gate`` is open, a newcomers' claim nothing once ``newcomers_gate`` is.
    ``listed``: the tenants with nothing running its list names."""

    def __init__(self, listed: int, won: list[Claim] | None = None) -> None:
        self.listed = listed
        self.won = won or []
        self.asked: list[tuple[str, int, int, list[str] | None]] = []
        self.tokens_gate, self.newcomers_gate = asyncio.Event(), asyncio.Event()
        self.tokens_gate.set()
        self.newcomers_gate.set()

    async def claim_next(
        self,
        count: int,
        worker: str,
        hints: Any = (),
        *,
        newcomers: bool = False,
        among: list[str] | None = None,
        reserved: int = 0,
    ) -> list[Claim]:
        self.asked.append(("newcomers" if newcomers else "tokens", count, reserved, among))
        if newcomers:
            await self.newcomers_gate.wait()
            return []
        await self.tokens_gate.wait()
        return self.won[: count + reserved]

    def may_have_newcomers(self, running_here: object, more_than: int = 0) -> bool:
        return self.listed > more_than


async def nothing() -> bool:
    return False


class Process:
    """A process with 4 slots, 2 of them reserved, and both unreserved ones busy. ``refill``:
    its freed slots' claim (:meth:`Runtime.claim_freed_slot`)."""

    def __init__(
        self, store: LendingStore, refill: Callable[[], Awaitable[bool | None]] = nothing
    ) -> None:
        self.store = store
        self.slots = Slots(4, reserve=2)
        assert self.slots.try_take() and self.slots.try_take()
        self.begun: list[Claim] = []
        self.another = False
        self.freed = FreedSlots(lambda: 2, refill)
        self.newcomers = NewcomerClaims(
            self.slots,
            cast(Store, store),
            "w",
            self.begun.append,
            lambda: (),
            self.freed,
            another=lambda: self.another,
        )

    def tokens_claim(self, count: int) -> asyncio.Task[list[Claim]]:
        async def claim_with(lent: int) -> list[Claim]:
            return await self.store.claim_next(count, "w", reserved=lent)

        return asyncio.create_task(self.newcomers.lending(claim_with, count))


async def test_a_tokens_claim_borrows_the_reserved_slots_and_begins_what_it_started_in_them() -> (
    None
):
    store = LendingStore(listed=3, won=[claim("1", "a"), claim("2", "b"), claim("3", "c")])
    process = Process(store)
    own = await process.tokens_claim(2)
    assert store.asked == [("tokens", 2, 2, None)]  # both free slots lent: only reserved ones
    assert [c.invocation_id for c in own] == ["1", "2"]  # for the tokens' slots
    assert [c.invocation_id for c in process.begun] == ["3"]  # in a lent slot
    assert process.slots.free == 1  # the lent slot it did not use is back


async def test_no_slot_is_lent_when_the_list_names_no_tenant_with_nothing_running() -> None:
    store = LendingStore(listed=0)
    process = Process(store)
    await process.tokens_claim(1)
    assert store.asked == [("tokens", 1, 0, None)]
    assert process.slots.free == 2


async def test_under_a_burst_from_many_owners_an_announcement_waits_for_the_tokens_claim() -> None:
    store = LendingStore(listed=3)  # more than the 2 reserved slots
    process = Process(store)
    process.slots.give()  # a slot for tokens is free: the claim borrows none
    store.tokens_gate.clear()
    in_flight = process.tokens_claim(1)
    await asyncio.sleep(0)
    assert process.slots.try_take()  # taken meanwhile: only the reserved ones are free
    process.newcomers.announced(["x"])
    await asyncio.sleep(0.01)
    assert store.asked == [("tokens", 1, 0, None)]  # no claim beside it
    store.tokens_gate.set()
    await in_flight
    await process.newcomers.settled()
    assert store.asked == [("tokens", 1, 0, None), ("newcomers", 1, 0, ["x"])]  # then at once


async def announced_during_a_tokens_claim(process: Process, tenant: str) -> None:
    """A tokens' claim of one runs, ``tenant`` is announced meanwhile, then the claim ends."""
    process.store.tokens_gate.clear()
    in_flight = process.tokens_claim(1)
    await asyncio.sleep(0)
    process.newcomers.announced([tenant])
    process.store.tokens_gate.set()
    await in_flight
    await process.newcomers.settled()


async def test_tenants_announced_during_a_claim_wait_for_the_next_one_about_to_run() -> None:
    store = LendingStore(listed=3)
    process = Process(store)
    process.another = True  # another tokens' claim is waiting
    await announced_during_a_tokens_claim(process, "x")
    assert store.asked == [("tokens", 1, 2, None)]  # the next claim reads x


async def test_a_tenant_a_claim_started_is_not_claimed_for_again() -> None:
    store = LendingStore(listed=3, won=[claim("1", "x")])
    process = Process(store)
    await announced_during_a_tokens_claim(process, "x")
    assert store.asked == [("tokens", 1, 2, None)]


async def test_with_few_waiting_an_announcement_claims_at_once_beside_the_tokens_claim() -> None:
    """One tenant's flood holds the unreserved slots and another's first invocation comes: it
    does not wait for the flood's claim in flight."""
    store = LendingStore(listed=0)  # the flood's tenant runs here: nothing lent
    process = Process(store)
    store.tokens_gate.clear()
    in_flight = process.tokens_claim(1)
    await asyncio.sleep(0)
    store.listed = 1
    process.newcomers.announced(["b"])
    await process.newcomers.settled()
    assert store.asked == [("tokens", 1, 0, None), ("newcomers", 1, 0, ["b"])]
    store.tokens_gate.set()
    await in_flight


async def test_a_claim_that_fails_gives_the_lent_slots_back_and_announcements_claim_again() -> None:
    store = LendingStore(listed=3)
    process = Process(store)

    async def failing(lent: int) -> list[Claim]:
        assert lent == 2
        raise ConnectionError("the database went away")

    with pytest.raises(ConnectionError):
        await process.newcomers.lending(failing, 1)
    assert process.slots.free == 2
    process.newcomers.announced(["x"])  # no tokens' claim in flight now: at once
    await process.newcomers.settled()
    assert store.asked == [("newcomers", 1, 0, ["x"])]


async def test_nothing_is_lent_while_a_reserved_slots_claim_of_its_own_runs() -> None:
    store = LendingStore(listed=3)
    process = Process(store)
    store.newcomers_gate.clear()
    process.newcomers.want(1)
    await asyncio.sleep(0)  # its claim holds a reserved slot
    await process.tokens_claim(1)
    assert store.asked == [("newcomers", 1, 0, None), ("tokens", 1, 0, None)]
    store.newcomers_gate.set()
    await process.newcomers.settled()
    assert process.slots.free == 2


async def test_a_slot_freed_while_the_reserved_ones_were_lent_claims_when_they_come_back() -> None:
    """An attempt ended during a claim that borrowed the reserved slots: its slot is reserved
    again, so its refill found none free; the slot given back in its place claims (a deployment
    whose tokens go to other processes too)."""
    refills: list[bool | None] = []

    async def refill() -> bool | None:
        if not process.slots.try_take():
            refills.append(None)
            return None
        process.slots.give()
        refills.append(False)
        return False

    store = LendingStore(listed=3)
    process = Process(store, refill)
    store.tokens_gate.clear()
    in_flight = process.tokens_claim(1)
    await asyncio.sleep(0)
    assert not process.slots.give()  # an attempt ends: a reserved slot again
    process.freed.slot_freed()
    await process.freed.settled()
    assert refills == [None]
    store.tokens_gate.set()
    await in_flight
    await process.freed.settled()
    assert refills == [None, False]  # the unreserved slot given back claimed
