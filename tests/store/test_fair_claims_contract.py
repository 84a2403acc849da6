"""The fair claim on both stores: caps, weighted shares, stride order, priorities and session
order, decided by the store (``claim_next``), the way every worker claims."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from tether.outcomes import completed
from tether.store.candidates import RESCAN, QueuedTenants
from tether.store.schema import Claim, NewInvocation, tenants
from tether.store.store import FinishRequest, Store
from tether.store.tenants import MIN_WEIGHT, TenantLimits


def new(
    tenant: str, *, priority: int = 0, session: str | None = None, owner: str = "ann"
) -> NewInvocation:
    return NewInvocation(
        str(uuid.uuid4()), owner, session, {}, "h", tenant=tenant, priority=priority
    )


async def queued(store: Store, tenant: str, count: int, **kwargs: object) -> list[str]:
    made = [new(tenant, **kwargs) for _ in range(count)]  # type: ignore[arg-type]
    for n in made:
        await store.accept(n)
    return [n.id for n in made]


def tenants_of(claims: list[Claim]) -> list[str]:
    return [c.tenant for c in claims]


async def finish(store: Store, claim: Claim) -> None:
    await store.finish(FinishRequest(claim.invocation_id, claim.attempt, completed(1)))


async def test_a_tenant_at_its_cap_waits_and_does_not_block_other_tenants(store: Store) -> None:
    await store.tenants.set("a", {"max_active": 2})
    await queued(store, "a", 5)
    await queued(store, "b", 2)
    claims = await store.claim_next(10, "w")
    assert sorted(tenants_of(claims)) == ["a", "a", "b", "b"]
    assert await store.claim_next(10, "w") == []  # a is full, b is empty
    await finish(store, next(c for c in claims if c.tenant == "a"))
    assert tenants_of(await store.claim_next(10, "w")) == ["a"]


async def test_the_defaults_row_caps_every_tenant_without_a_row(store: Store) -> None:
    await store.tenants.set("*", {"max_active": 1})
    await store.tenants.set("big", {"max_active": 3})
    for tenant in ("x", "y", "big"):
        await queued(store, tenant, 4)
    claims = await store.claim_next(20, "w")
    assert sorted(tenants_of(claims)) == ["big", "big", "big", "x", "y"]


async def test_the_global_cap_bounds_running_attempts_across_tenants(store: Store) -> None:
    await store.tenants.set_global_max_active(3)
    for tenant in ("a", "b"):
        await queued(store, tenant, 3)
    first = await store.claim_next(10, "w")
    assert len(first) == 3
    assert await store.claim_next(10, "w") == []
    await finish(store, first[0])
    assert len(await store.claim_next(10, "w")) == 1


async def test_a_cap_raised_at_run_time_applies_at_the_next_claim(store: Store) -> None:
    await store.tenants.set("a", {"max_active": 1})
    await queued(store, "a", 4)
    assert len(await store.claim_next(10, "w")) == 1
    assert await store.claim_next(10, "w") == []
    await store.tenants.set("a", {"max_active": 3})
    assert len(await store.claim_next(10, "w")) == 2
    await store.tenants.set("a", {"max_active": 0})  # lowered: nothing new starts
    assert await store.claim_next(10, "w") == []


async def test_a_claim_of_one_invocation_respects_the_caps_too(store: Store) -> None:
    await store.tenants.set("a", {"max_active": 1})
    first, second = await queued(store, "a", 2)
    assert await store.claim(first, "w") is not None
    assert await store.claim(second, "w") is None
    await store.tenants.set_global_max_active(1)
    [other] = await queued(store, "b", 1)
    assert await store.claim(other, "w") is None


async def test_saturated_slots_are_shared_in_proportion_to_weights(store: Store) -> None:
    await store.tenants.set("b", {"weight": 3})
    await queued(store, "a", 20)
    await queued(store, "b", 20)
    claims = await store.claim_next(8, "w")
    assert tenants_of(claims) == ["a", "b", "b", "b", "a", "b", "b", "b"]
    # running 2 : 6 already matches 1 : 3; a slot that frees goes to whoever is below its share
    await finish(store, claims[0])
    assert tenants_of(await store.claim_next(1, "w")) == ["a"]
    await finish(store, claims[1])
    assert tenants_of(await store.claim_next(1, "w")) == ["b"]


async def test_equally_loaded_tenants_alternate_by_weight_one_claim_at_a_time(
    store: Store,
) -> None:
    await store.tenants.set("b", {"weight": 3})
    await queued(store, "a", 20)
    await queued(store, "b", 20)
    order = []
    for _ in range(12):
        [claim] = await store.claim_next(1, "w")
        order.append(claim.tenant)
        await finish(store, claim)  # nothing runs between claims: only the passes decide
    assert order == ["a", "b", "b", "b"] * 3


async def test_the_smallest_weight_still_lets_every_tenant_be_claimed(store: Store) -> None:
    await store.tenants.set("a", {"weight": MIN_WEIGHT})
    await queued(store, "a", 5)
    await queued(store, "b", 5)
    order = []
    for _ in range(10):  # each of a's claims moves its pass a million ahead: it stays a number
        [claim] = await store.claim_next(1, "w")
        order.append(claim.tenant)
        await finish(store, claim)
    assert order == ["a", "b", "b", "b", "b", "b", "a", "a", "a", "a"]


async def test_a_weight_stored_below_the_bound_is_read_as_the_bound(store: Store) -> None:
    async with store.db.transaction() as conn:  # as a version before the bound could write it
        await conn.execute(
            sa.insert(tenants).values(
                {**TenantLimits().to_json(), "tenant": "a", "weight": 5e-324, "updated_at": 0.0}
            )
        )
    row = await store.tenants.row("a")
    assert row is not None and row.limits.weight == MIN_WEIGHT
    await queued(store, "a", 2)
    await queued(store, "b", 2)
    claims = await store.claim_next(4, "w")
    assert sorted(tenants_of(claims)) == ["a", "a", "b", "b"]


async def test_a_tenant_back_from_an_empty_queue_banks_no_credit(store: Store) -> None:
    await queued(store, "a", 30)
    for _ in range(10):
        [claim] = await store.claim_next(1, "w")
        await finish(store, claim)
    tokens = await queued(store, "c", 10)  # c was idle while a ran ten
    order = []
    for token in tokens[:6]:  # each claim with the token of one of c's, as a worker's would
        [claim] = await store.claim_next(1, "w", [token])
        order.append(claim.tenant)
        await finish(store, claim)
    assert order == ["c", "a", "c", "a", "c", "a"]


async def test_priority_orders_a_tenants_own_work_first_then_fifo(store: Store) -> None:
    low = new("a")
    high = new("a", priority=5)
    low_again = new("a")
    higher = new("a", priority=9)
    for n in (low, high, low_again, higher):
        await store.accept(n)
    claims = await store.claim_next(4, "w")
    assert [c.invocation_id for c in claims] == [higher.id, high.id, low.id, low_again.id]


async def test_priority_never_crosses_tenants(store: Store) -> None:
    await queued(store, "a", 3)
    await queued(store, "b", 3, priority=10)
    claims = await store.claim_next(4, "w")
    assert sorted(tenants_of(claims)) == ["a", "a", "b", "b"]


async def test_session_order_holds_under_fair_claiming(store: Store) -> None:
    head, successor = new("a", session="s"), new("a", session="s")
    plain = new("a")
    for n in (head, successor, plain):
        await store.accept(n)
    claims = await store.claim_next(10, "w")
    assert [c.invocation_id for c in claims] == [head.id, plain.id]
    await finish(store, claims[0])
    assert [c.invocation_id for c in await store.claim_next(10, "w")] == [successor.id]


async def test_a_session_blocked_head_does_not_block_its_tenants_other_work(store: Store) -> None:
    head = new("a", session="s")
    await store.accept(head)
    assert [c.invocation_id for c in await store.claim_next(1, "w")] == [head.id]
    blocked = [new("a", session="s", priority=9) for _ in range(3)]  # first in a's order
    for n in blocked:
        await store.accept(n)
    plain = new("a")
    await store.accept(plain)
    assert [c.invocation_id for c in await store.claim_next(5, "w")] == [plain.id]


async def test_a_replacement_in_its_backoff_is_not_claimed_early(store: Store) -> None:
    [first] = await queued(store, "a", 1)
    [claim] = await store.claim_next(1, "w")
    assert await store.requeue_for_recovery(first, claim.attempt, -1.0, 3600.0)
    assert await store.claim_next(1, "w") == []


async def test_nothing_queued_claims_nothing(store: Store) -> None:
    assert await store.claim_next(5, "w") == []
    await store.tenants.set("a", {"max_active": 0})
    await queued(store, "a", 2)
    assert await store.claim_next(5, "w") == []


async def a_list_without_c(store: Store) -> list[float]:
    """A store whose claims have read ``a``'s work from a fresh tenant list (its clock
    returned), with ``c``'s work queued since, neither scanned nor announced."""
    now = [0.0]
    store._claims._queued = QueuedTenants(clock=lambda: now[0])
    await queued(store, "a", 30)
    for _ in range(3):
        [claim] = await store.claim_next(1, "w")
        await finish(store, claim)
    await queued(store, "c", 3)
    return now


async def test_a_tenant_whose_tokens_went_elsewhere_is_claimed_once_the_list_is_rescanned(
    store: Store,
) -> None:
    """A process claims from the tenant list it last scanned while that fills its claims; a
    tenant it never got a token for joins at the next scan (``candidates.RESCAN``)."""
    now = await a_list_without_c(store)
    [claim] = await store.claim_next(1, "w")
    assert claim.tenant == "a"  # the list, still fresh, lacks c
    await finish(store, claim)
    now[0] += RESCAN
    [claim] = await store.claim_next(1, "w")
    assert claim.tenant == "c"


async def test_a_claim_the_list_cannot_fill_scans_at_once(store: Store) -> None:
    await queued(store, "a", 2)
    [claim] = await store.claim_next(1, "w")
    await finish(store, claim)
    await queued(store, "c", 2)
    claims = await store.claim_next(3, "w")  # a has one left: the claim scans and finds c
    assert sorted(tenants_of(claims)) == ["a", "c", "c"]


async def test_an_announced_tenant_is_claimed_at_the_next_claim_without_a_scan(
    store: Store,
) -> None:
    await a_list_without_c(store)
    store.announced(["c"])  # a gateway's announcement, ahead of c's tokens
    [claim] = await store.claim_next(1, "w")
    assert claim.tenant == "c"


async def test_announcements_possibly_missed_make_the_next_claim_scan(store: Store) -> None:
    await a_list_without_c(store)
    store.announced(None)  # pub/sub reconnected
    [claim] = await store.claim_next(1, "w")
    assert claim.tenant == "c"


def test_an_announcement_during_a_scan_survives_the_scan_that_missed_it() -> None:
    now = [10.0]
    tenants = QueuedTenants(clock=lambda: now[0])
    began = tenants.scanning()
    now[0] += 0.001
    tenants.announced(["late"])  # committed after the scan read the database
    tenants.scanned(["a"], began)
    assert tenants.names == ["a", "late"]
    now[0] += 0.001
    began = tenants.scanning()
    tenants.scanned(["a"], began)  # a later scan is the truth again
    assert tenants.names == ["a"]


async def test_a_newcomers_claim_starts_only_tenants_with_nothing_running(store: Store) -> None:
    await queued(store, "a", 3)
    [running] = await store.claim_next(1, "w")
    await queued(store, "b", 2)
    store.announced(["b"])  # as the gateway that accepted them does
    claims = await store.claim_next(5, "w", newcomers=True)
    assert tenants_of(claims) == ["b"]  # one: b then has something running
    assert await store.claim_next(5, "w", newcomers=True) == []
    await finish(store, running)
    await finish(store, claims[0])
    again = await store.claim_next(5, "w", newcomers=True)
    assert sorted(tenants_of(again)) == ["a", "b"]  # both run nothing now: one each


async def test_a_newcomers_claim_among_tenants_reads_and_starts_only_those(store: Store) -> None:
    for tenant in ("a", "b", "c"):
        await queued(store, tenant, 2)
    store.announced(["a", "b", "c"])
    claims = await store.claim_next(5, "w", newcomers=True, among=["b", "c"])
    assert sorted(tenants_of(claims)) == ["b", "c"]  # a has nothing running, but was not named
    assert await store.claim_next(5, "w", newcomers=True, among=["b"]) == []  # b runs one now
    [claim] = await store.claim_next(5, "w", newcomers=True)  # the whole list: a
    assert claim.tenant == "a"


def test_a_newcomers_claim_is_worth_reading_only_for_a_tenant_not_running_here() -> None:
    """The periodic pass asks for a newcomers' claim only when this process's tenant list names
    a tenant with nothing running here, or the list is stale (it may lack one)."""
    now = [10.0]
    tenants = QueuedTenants(clock=lambda: now[0])
    tenants.scanned(["a"], tenants.scanning())
    assert not tenants.may_list_newcomers({"a"})
    assert tenants.may_list_newcomers(set())
    tenants.announced(["b"])
    assert tenants.may_list_newcomers({"a"})
    assert not tenants.may_list_newcomers({"a", "b"})
    now[0] += RESCAN
    assert tenants.may_list_newcomers({"a", "b"})  # stale: a scan may find another


def test_more_newcomers_listed_than_a_count_is_told_from_that_many() -> None:
    """Whether more tenants with nothing running may wait than a process's reserved slots."""
    now = [10.0]
    tenants = QueuedTenants(clock=lambda: now[0])
    tenants.scanned(["a", "b", "c", "d"], tenants.scanning())
    assert tenants.may_list_newcomers({"a"}, more_than=2)  # b, c, d
    assert not tenants.may_list_newcomers({"a"}, more_than=3)
    assert not tenants.may_list_newcomers({"a", "b"}, more_than=2)
    assert not tenants.may_list_newcomers({"a", "b", "c", "d"}, more_than=0)
    now[0] += RESCAN
    assert tenants.may_list_newcomers({"a", "b", "c", "d"}, more_than=5)  # stale


async def test_reserved_slots_lent_to_a_claim_start_only_tenants_with_nothing_running(
    store: Store,
) -> None:
    """A tokens' claim borrowing the reserved slots: its own slots go in fair order, then the
    borrowed ones each to a tenant with nothing running that those left out, one each."""
    await queued(store, "a", 4)
    [running] = await store.claim_next(1, "w")
    for tenant in ("b", "c", "d"):
        await queued(store, tenant, 3)
    store.announced(["b", "c", "d"])
    claims = await store.claim_next(1, "w", reserved=5)
    assert tenants_of(claims) == ["b", "c", "d"]  # b in its own slot; c and d one each, not a
    more = await store.claim_next(1, "w", reserved=5)  # all run something: the one slot alone
    assert len(more) == 1
    await finish(store, running)
    for claim in claims + more:
        await finish(store, claim)
    again = tenants_of(await store.claim_next(1, "w", reserved=1))
    assert len(again) == len(set(again)) == 2  # nothing runs: a second tenant in the lent slot


async def test_a_capped_deployment_lends_no_slot_past_its_cap(store: Store) -> None:
    await store.tenants.set_global_max_active(2)
    for tenant in ("a", "b", "c"):
        await queued(store, tenant, 1)
    store.announced(["a", "b", "c"])
    assert len(await store.claim_next(1, "w", reserved=5)) == 2
