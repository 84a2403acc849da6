"""Reserved slots (``worker.reserve``): tokens and refills never take them, and a gateway's
announcement of a tenant with nothing running starts its work in one at once, so another
tenant's flood does not make it wait for a slot to free."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, cast

from tests.fakes import NoQueue
from tether import AgentApp, InvocationContext
from tether.pubsub import MemoryPubSub
from tether.queue import Queue
from tether.services import Services
from tether.store.schema import NewInvocation, Status
from tether.store.store import Store
from tether.worker.newcomers import NewcomerClaims
from tether.worker.refills import FreedSlots
from tether.worker.runtime import Runtime
from tether.worker.slots import Slots


def test_tokens_never_take_a_reserved_slot_and_a_newcomer_claim_takes_any() -> None:
    slots = Slots(3, reserve=1)
    assert slots.try_take() and slots.try_take()
    assert not slots.try_take()  # the last one is reserved
    assert not slots.take(timeout=0.01)
    assert not slots.open_to_tokens
    assert slots.try_take_reserved()
    assert not slots.try_take_reserved()
    slots.give()
    assert not slots.try_take()  # the slot given back is the reserved one again
    slots.give()
    assert slots.open_to_tokens and slots.try_take()


def test_at_least_one_slot_is_never_reserved() -> None:
    slots = Slots(1, reserve=5)
    assert slots.try_take()
    slots.give()
    assert Slots(4, reserve=0).try_take()


async def accept(store: Store, tenant: str) -> str:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, tenant, None, {}, "h", tenant=tenant))
    return invocation_id


async def status(store: Store, invocation_id: str) -> str:
    found = await store.get(invocation_id)
    assert found is not None
    return found.status


async def test_an_announced_tenant_with_nothing_running_starts_while_a_flood_holds_the_rest(
    store: Store,
) -> None:
    app, release = AgentApp(), asyncio.Event()

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        await release.wait()
        return "done"

    runtime = Runtime(
        services=Services(store, MemoryPubSub(), Queue(NoQueue())),
        app=app,
        name="host:1",
        concurrency=3,
        reserve=1,
        max_event_bytes=1 << 20,
    )
    flood = [await accept(store, "a") for _ in range(5)]
    assert await runtime.claim_free() == 2  # the reserved slot is not a's: a has work running
    await asyncio.sleep(0.05)
    assert [await status(store, i) for i in flood].count(Status.ACTIVE.value) == 2

    runtime.announced(["a"])  # a runs here already: nothing to do
    late = await accept(store, "b")
    runtime.announced(["b"])
    for _ in range(100):
        if await status(store, late) == Status.ACTIVE.value:
            break
        await asyncio.sleep(0.02)
    assert await status(store, late) == Status.ACTIVE.value
    assert [await status(store, i) for i in flood].count(Status.ACTIVE.value) == 2

    release.set()
    await runtime.drain(5.0)


class RecordingStore:
    """Records what each newcomers' claim asked for; starts nothing, each claim once ``gate``
    is open."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, list[str] | None]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def claim_next(
        self, count: int, worker: str, *, newcomers: bool, among: list[str] | None
    ) -> list[Any]:
        assert newcomers
        self.asked.append((count, among))
        await self.gate.wait()
        return []

    def may_have_newcomers(self, running_here: object) -> bool:
        return True


async def test_an_announcements_claim_reads_the_announced_tenants_alone_the_pass_the_list() -> None:
    """Under a burst from many owners the process's list names hundreds of tenants, and a
    claim's cost grows with the tenants it weighs: an announcement's claim names its own."""
    store = RecordingStore()
    slots = Slots(3, reserve=1)
    assert slots.try_take() and slots.try_take()  # only the reserved slot is free
    newcomers = NewcomerClaims(
        slots, cast(Store, store), "w", lambda claim: None, lambda: (), FreedSlots(lambda: 2, noop)
    )
    newcomers.announced(["b", "a", "b"])
    await newcomers.settled()
    newcomers.after_pass()
    await newcomers.settled()
    assert store.asked == [(1, ["a", "b"]), (1, None)]


async def noop() -> bool:
    return False


def newcomers_beside(store: RecordingStore, slots: Slots) -> NewcomerClaims:
    freed = FreedSlots(lambda: 2, noop)
    return NewcomerClaims(slots, cast(Store, store), "w", lambda claim: None, lambda: (), freed)


async def test_tenants_a_claim_had_no_slot_for_stay_named_for_the_next() -> None:
    store, slots = RecordingStore(), Slots(3, reserve=1)
    assert slots.try_take() and slots.try_take()
    newcomers = newcomers_beside(store, slots)
    newcomers.announced(["a", "c"])  # one reserved slot for two: neither started
    await newcomers.settled()
    newcomers.announced(["d"])
    await newcomers.settled()
    assert store.asked == [(1, ["a", "c"]), (1, ["a", "c", "d"])]


async def test_tenants_announced_while_a_claim_runs_are_all_claimed_for_after_it() -> None:
    store, slots = RecordingStore(), Slots(4, reserve=2)
    assert slots.try_take() and slots.try_take()
    newcomers = newcomers_beside(store, slots)
    store.gate.clear()
    newcomers.announced(["a"])
    await asyncio.sleep(0)
    newcomers.announced(["x"])  # two announcements while a's claim runs: a slot for each
    newcomers.announced(["y"])
    store.gate.set()
    await newcomers.settled()
    assert store.asked == [(1, ["a"]), (2, ["x", "y"])]
