"""Model usage in the store, on both stores: per invocation and per tenant and period, added
atomically, read back for budget checks and metrics."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from tests.agents.agent_server import wait_for
from tether.store.schema import NewInvocation
from tether.store.store import Store
from tether.store.tenants import MIN_BUDGET_PERIOD
from tether.store.usage import period_start
from tether.usage import ModelUsage, UsageTotals


async def test_each_call_adds_to_its_invocation_and_its_tenants_current_period(
    store: Store,
) -> None:
    await store.accept(NewInvocation("inv-a", "ann", None, {}, "h", tenant="acme"))
    await store.usage.add("inv-a", "acme", 86400, ModelUsage(100, 20, 0.5))
    await store.usage.add("inv-a", "acme", 86400, ModelUsage(30, 7, 0.25, estimated=True))
    invocation = await store.get("inv-a")
    assert invocation is not None
    assert invocation.usage == UsageTotals(130, 27, 0.75, True, 2)
    state = await store.usage.state("inv-a", "acme")
    assert (state.period_tokens, state.period_cost) == (157, 0.75)
    assert state.invocation.total_tokens == 157
    assert state.period_start == period_start(state.now, 86400) and state.period_start % 86400 == 0
    assert [(t.tenant, t.tokens, t.period_tokens) for t in await store.usage.tenants()] == [
        ("acme", 157, 157)
    ]


async def test_an_invocation_without_model_calls_has_no_usage(store: Store) -> None:
    await store.accept(NewInvocation("inv-b", "bob", None, {}, "h"))
    invocation = await store.get("inv-b")
    assert invocation is not None and invocation.usage is None
    state = await store.usage.state("inv-b", "bob")
    assert state.invocation == UsageTotals() and state.period_tokens == 0


async def test_concurrent_calls_of_one_tenant_lose_no_update(store: Store) -> None:
    for name in ("inv-1", "inv-2"):
        await store.accept(NewInvocation(name, "ann", None, {}, "h", tenant="acme"))
    adds = [
        store.usage.add(f"inv-{1 + i % 2}", "acme", 86400, ModelUsage(10, 1, 0.125))
        for i in range(20)
    ]
    await asyncio.gather(*adds)
    state = await store.usage.state("inv-1", "acme")
    assert (state.period_tokens, state.period_cost) == (220, 2.5)
    assert state.invocation == UsageTotals(100, 10, 1.25, False, 10)


async def test_a_new_period_starts_from_nothing_and_the_totals_keep_counting(
    store: Store,
) -> None:
    await store.accept(NewInvocation("inv-c", "ann", None, {}, "h", tenant="acme"))
    await store.tenants.set("acme", {"budget_period": MIN_BUDGET_PERIOD})
    first = await store.usage.add("inv-c", "acme", MIN_BUDGET_PERIOD, ModelUsage(40, 2))

    async def next_period() -> bool:  # the database clock is past the first call's period
        return (await store.usage.state("inv-c", "acme")).period_start != first

    await wait_for(next_period)
    second = await store.usage.add("inv-c", "acme", MIN_BUDGET_PERIOD, ModelUsage(5, 1))
    assert second > first
    state = await store.usage.state("inv-c", "acme")
    assert state.period_tokens == (6 if state.period_start == second else 0)
    assert state.invocation.total_tokens == 48  # an invocation's usage spans periods
    [tenant] = await store.usage.tenants(["acme"])
    assert tenant.tokens == 48


async def test_period_start_is_aligned_to_the_epoch() -> None:
    assert period_start(86400 * 3 + 5.0, 86400) == 86400 * 3
    assert period_start(100.0, 60) == 60
    assert period_start(59.999, 60) == 0


async def test_a_period_stored_under_the_bound_by_an_earlier_release_reads_as_the_bound(
    store: Store,
) -> None:
    """A ``budget_period`` of ``1e-300`` (accepted before it was bounded) made ``now / period``
    infinite: every agent run of the tenant failed at its first budget check."""
    await store.accept(NewInvocation("inv-d", "ann", None, {}, "h", tenant="acme"))
    await store.tenants.set("acme", {"tokens_per_period": 100})
    async with store.engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE tether_tenants SET budget_period = 1e-300 WHERE tenant = 'acme'")
        )
    state = await store.usage.state("inv-d", "acme")
    assert state.limits.budget_period == MIN_BUDGET_PERIOD
    assert state.period_start == period_start(state.now, MIN_BUDGET_PERIOD)
