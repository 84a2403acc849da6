"""The fair allocation of free slots, as a pure function."""

from __future__ import annotations

import heapq
import random

from tether.store.fairness import Allocation, TenantLoad, allocate, allocate_reserving


def load(
    tenant: str,
    running: int = 0,
    weight: float = 1.0,
    cap: int | None = None,
    stored: float | None = None,
) -> TenantLoad:
    return TenantLoad(tenant, running, weight, cap, stored)


def test_slots_go_to_the_tenant_furthest_below_its_weighted_share() -> None:
    picks = allocate([load("a", running=3), load("b", running=0, weight=2)], 4, 0.0).picks
    assert picks == ["b", "b", "b", "b"]  # b reaches 4 running against a's 3 at weight 2:1


def test_a_tenant_at_its_cap_gets_nothing_and_its_slots_go_to_others() -> None:
    picks = allocate([load("a", running=2, cap=2), load("b")], 3, 0.0).picks
    assert picks == ["b", "b", "b"]


def test_a_tenant_is_given_no_more_than_its_queue_yields() -> None:
    picks = allocate([load("a"), load("b")], 6, 0.0, {"a": 1}).picks
    assert sorted(picks) == ["a", "b", "b", "b", "b", "b"]


def test_an_idle_tenants_old_pass_counts_as_the_virtual_time() -> None:
    allocation = allocate([load("busy", stored=50.0), load("back", stored=1.0)], 3, 49.5)
    assert allocation.picks == ["back", "busy", "back"]
    assert allocation.vtime == 49.5
    assert allocation.passes == {"back": 51.5, "busy": 51.0}


def test_the_budget_bounds_the_picks() -> None:
    assert allocate([load("a"), load("b")], 0, 0.0).picks == []
    assert len(allocate([load("a")], 5, 0.0).picks) == 5


def reference_allocate(
    loads: list[TenantLoad], budget: int, vtime: float, available: dict[str, int]
) -> Allocation:
    """The rule as first written: every tenant on one heap, one slot at a time."""
    heap: list[tuple[float, float, str]] = []
    state: dict[str, tuple[int, float, int | None]] = {}
    for load in loads:
        room = None if load.max_active is None else max(0, load.max_active - load.running)
        known = available.get(load.tenant)
        left = room if known is None else known if room is None else min(room, known)
        if left is not None and left <= 0:
            continue
        own = max(load.stored_pass or 0.0, vtime)
        state[load.tenant] = (load.running, own, left)
        heapq.heappush(heap, (round(load.running / load.weight, 9), round(own, 6), load.tenant))
    weights = {load.tenant: load.weight for load in loads}
    next_vtime = max(vtime, min((s[1] for s in state.values()), default=vtime))
    picks: list[str] = []
    passes: dict[str, float] = {}
    while heap and len(picks) < budget:
        *_, tenant = heapq.heappop(heap)
        running, own, left = state[tenant]
        running, own = running + 1, own + 1.0 / weights[tenant]
        left = None if left is None else left - 1
        state[tenant] = (running, own, left)
        picks.append(tenant)
        passes[tenant] = own
        if left is None or left > 0:
            key = (round(running / weights[tenant], 9), round(own, 6), tenant)
            heapq.heappush(heap, key)
    return Allocation(picks, passes, next_vtime)


def test_the_allocation_is_the_one_of_every_tenant_on_one_heap() -> None:
    """Only the first ``budget`` tenants in the order of service enter the heap; the picks,
    passes and virtual time are those of the rule over all of them, on random loads."""
    rng = random.Random(7)
    for _ in range(400):
        vtime = rng.choice([0.0, rng.uniform(0, 20)])
        loads = [
            load(
                f"t{k}",
                running=rng.randint(0, 4),
                weight=rng.choice([1.0, 1.0, 2.0, 0.5, 3.0]),
                cap=rng.choice([None, None, 1, 3]),
                stored=rng.choice([None, vtime, rng.uniform(0, 25), vtime + 1 / 3]),
            )
            for k in range(rng.randint(0, 40))
        ]
        available = {t.tenant: rng.randint(0, 3) for t in loads if rng.random() < 0.2}
        budget = rng.randint(0, 30)
        assert allocate(loads, budget, vtime, available) == reference_allocate(
            loads, budget, vtime, available
        )


def test_lent_slots_go_one_each_to_tenants_with_nothing_running_the_budget_left_out() -> None:
    loads = [load("busy", running=2), load("a"), load("b", cap=3), load("c"), load("d")]
    allocation = allocate_reserving(loads, 2, 5, 0.0)
    assert allocation.picks == ["a", "b", "c", "d"]  # busy runs something: no lent slot
    assert allocation.passes == {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}
    assert allocate_reserving(loads, 2, 0, 0.0) == allocate(loads, 2, 0.0)


def test_a_round_that_knows_a_tenant_has_less_takes_no_slot_from_another() -> None:
    """The claim repeats the allocation when a tenant yields fewer than it was given; the
    invocations already started stay, so no tenant may be given fewer than before."""
    rng = random.Random(7)
    for _ in range(300):
        loads = [
            load(
                t,
                running=rng.choice((0, 0, 0, 1, 2)),
                weight=rng.choice((1.0, 1.0, 2.0, 0.5)),
                cap=rng.choice((None, None, 1, 2, 3)),
                stored=rng.choice((None, 0.5, 1.0, 2.0)),
            )
            for t in "abcdefgh"
        ]
        budget, reserved = rng.randint(1, 8), rng.randint(0, 4)
        known: dict[str, int] = {}
        before = allocate_reserving(loads, budget, reserved, 0.5, known)
        for _round in range(4):
            if not before.picks:
                break
            short = rng.choice(before.picks)  # it yields fewer than it was given, maybe some
            known[short] = rng.randint(0, before.picks.count(short) - 1)
            after = allocate_reserving(loads, budget, reserved, 0.5, known)
            for tenant in set(before.picks):
                kept = min(before.picks.count(tenant), known.get(tenant, budget + reserved))
                assert after.picks.count(tenant) >= kept
            before = after
