"""The fair allocation of free slots, as a pure function."""

from __future__ import annotations

from tether.store.fairness import TenantLoad, allocate


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
