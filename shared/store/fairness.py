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
from typing import NamedTuple


class TenantLoad(NamedTuple):
    """One tenant with queued work, as the claim read it (a tuple: a claim builds one for every
    tenant it read, hundreds under a burst from many owners, and a frozen dataclass cost 8x as
    much to build)."""

    tenant: str
    running: int
    weight: float
    max_active: int | None
    stored_pass: float | None
    """Its pass as of its last pick; None: never picked."""


@dataclass(frozen=True, slots=True)
class Allocation:
    picks: list[str]
    """The tenant served by each slot, in order."""
    passes: dict[str, float]
    """The new pass of every tenant picked."""
    vtime: float
    """The virtual time after this claim: the least pass of the tenants that could run."""


_Entry = tuple[float, float, str, int, float, float, int | None]
"""A tenant in the order of service: its running attempts per unit of weight and its pass, as
compared (loads and passes equal but for float rounding, thirds added up, are equal), its name
(ties), then what a pick changes: running, weight, pass, picks left (None: no limit)."""


def allocate(
    loads: Sequence[TenantLoad],
    budget: int,
    vtime: float,
    available: Mapping[str, int] | None = None,
) -> Allocation:
    """Serve up to ``budget`` slots. ``available``: how many claimable invocations a tenant is
    known to have (absent: as many as it may take).

    Only the ``budget`` tenants first in the order of service can be picked: a pick's next key
    is above the one it had, so every tenant ahead of another is served before it. So the heap
    holds those alone (a claim reads every tenant with queued work, and one of 13 slots among
    256 tenants built a heap of all of them)."""
    available = available or {}
    idle = max(vtime, 0.0)  # the pass of a tenant whose own is behind the virtual time
    idle_key = round(idle, 6)
    entries: list[_Entry] = []
    for tenant, running, weight, max_active, stored in loads:
        left = available.get(tenant)
        if max_active is not None:
            room = max(0, max_active - running)
            left = room if left is None else min(left, room)
        if left is not None and left <= 0:
            continue
        if stored is not None and stored > vtime:
            own, own_key = stored, round(stored, 6)
        else:
            own, own_key = idle, idle_key
        entries.append((_share(running, weight), own_key, tenant, running, weight, own, left))
    next_vtime = min((e[5] for e in entries), default=vtime)
    heap = heapq.nsmallest(budget, entries)  # sorted: a heap
    picks: list[str] = []
    passes: dict[str, float] = {}
    while heap and len(picks) < budget:
        _, _, tenant, running, weight, own, left = heapq.heappop(heap)
        running, own = running + 1, own + 1.0 / weight
        left = None if left is None else left - 1
        picks.append(tenant)
        passes[tenant] = own
        if left is None or left > 0:
            heapq.heappush(
                heap, (_share(running, weight), round(own, 6), tenant, running, weight, own, left)
            )
    return Allocation(picks, passes, max(vtime, next_vtime))


def allocate_reserving(
    loads: Sequence[TenantLoad],
    budget: int,
    reserved: int,
    vtime: float,
    available: Mapping[str, int] | None = None,
) -> Allocation:
    """:func:`allocate` of ``budget`` slots, then of up to ``reserved`` more, each to a tenant
    with nothing running that the first left out, one each (a worker process's reserved slots,
    lent to the claim of its unreserved ones: one claim where there were two).

    In the order of service a tenant with nothing running comes before any with something, so
    the first allocation serves them first, and the second takes the next of them; a later round
    that knows a tenant has less (:func:`allocate`'s ``available``) so takes no slot from another
    tenant."""
    first = allocate(loads, budget, vtime, available)
    if reserved <= 0:
        return first
    picked = set(first.picks)
    rest = [load for load in first_of_each(loads) if load.tenant not in picked]
    if not rest:
        return first
    more = allocate(rest, reserved, vtime, available)
    return Allocation(first.picks + more.picks, first.passes | more.passes, first.vtime)


def first_of_each(loads: Sequence[TenantLoad]) -> list[TenantLoad]:
    """The tenants with nothing running, each allowed one more (then it has something)."""
    return [
        load._replace(max_active=1 if load.max_active is None else min(load.max_active, 1))
        for load in loads
        if load.running == 0
    ]


def wanted(allocation: Allocation) -> dict[str, int]:
    """How many invocations each tenant's queue must yield for ``allocation``."""
    counts: dict[str, int] = {}
    for tenant in allocation.picks:
        counts[tenant] = counts.get(tenant, 0) + 1
    return counts


def _share(running: int, weight: float) -> float:
    """Running attempts per unit of weight, rounded for comparing (at weight 1, exact)."""
    return float(running) if weight == 1.0 else round(running / weight, 9)
