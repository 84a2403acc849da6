"""Which tenants the next claim serves, and how many of their invocations: weighted fair shares
with stride passes, within every cap. Pure functions over the loads the claim read under its
lock (:mod:`tether.store.claims`); no database here.

Order of service, one slot at a time: among tenants under their ``max_active`` with claimable
work, the one with the fewest running attempts per unit of weight; ties go to the lowest stride
pass (each pick advances a tenant's pass by ``1 / weight``), then to the name. Under saturation,
running slots so converge to the weights' shares, and tenants with equal load alternate in
proportion to their weights. A pass below the scheduler's virtual time counts as the virtual
time, so a tenant whose queue was empty banks no credit for its quiet spell.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TenantLoad:
    """One tenant with queued work, as the claim read it."""

    tenant: str
    running: int
    weight: float
    max_active: int | None
    stored_pass: float | None
    """Its pass as of its last pick; None: never picked."""

    def room(self) -> int | None:
        """Attempts it may still start; None: no cap."""
        return None if self.max_active is None else max(0, self.max_active - self.running)


@dataclass(frozen=True, slots=True)
class Allocation:
    picks: list[str]
    """The tenant served by each slot, in order."""
    passes: dict[str, float]
    """The new pass of every tenant picked."""
    vtime: float
    """The virtual time after this claim: the least pass of the tenants that could run."""


def allocate(
    loads: Sequence[TenantLoad],
    budget: int,
    vtime: float,
    available: Mapping[str, int] | None = None,
) -> Allocation:
    """Serve up to ``budget`` slots. ``available``: how many claimable invocations a tenant is
    known to have (absent: as many as it may take)."""
    available = available or {}
    heap: list[tuple[float, float, str]] = []
    state: dict[str, tuple[int, float, int | None]] = {}  # running, pass, picks left
    for load in loads:
        left = _least(load.room(), available.get(load.tenant))
        if left is not None and left <= 0:
            continue
        own = max(load.stored_pass or 0.0, vtime)
        state[load.tenant] = (load.running, own, left)
        heapq.heappush(heap, _key(load.running, load.weight, own, load.tenant))
    weights = {load.tenant: load.weight for load in loads}
    next_vtime = max(vtime, min((s[1] for s in state.values()), default=vtime))
    picks: list[str] = []
    passes: dict[str, float] = {}
    while heap and len(picks) < budget:
        *_, tenant = heapq.heappop(heap)
        running, own, left = state[tenant]
        weight = weights[tenant]
        running, own = running + 1, own + 1.0 / weight
        left = None if left is None else left - 1
        state[tenant] = (running, own, left)
        picks.append(tenant)
        passes[tenant] = own
        if left is None or left > 0:
            heapq.heappush(heap, _key(running, weight, own, tenant))
    return Allocation(picks, passes, next_vtime)


def wanted(allocation: Allocation) -> dict[str, int]:
    """How many invocations each tenant's queue must yield for ``allocation``."""
    counts: dict[str, int] = {}
    for tenant in allocation.picks:
        counts[tenant] = counts.get(tenant, 0) + 1
    return counts


def _key(running: int, weight: float, own: float, tenant: str) -> tuple[float, float, str]:
    """The order of service; loads and passes equal but for float rounding (thirds added up)
    are equal."""
    return round(running / weight, 9), round(own, 6), tenant


def _least(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)
