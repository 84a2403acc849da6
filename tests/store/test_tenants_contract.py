"""Tenants' limits on both stores: defaults, a tenant's own row, validation, the global cap."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from tests.store.rows import until_a_lock_wait
from tether.store.schema import NewInvocation
from tether.store.store import Store
from tether.store.tenants import DEFAULTS, MAX_RATE, LimitInvalid, TenantLimits


async def test_without_rows_no_tenant_has_limits(store: Store) -> None:
    assert await store.tenants.effective(["acme"]) == {"acme": TenantLimits()}
    assert await store.tenants.rows() == []
    assert await store.tenants.global_max_active() is None


async def test_defaults_apply_until_a_tenant_has_a_row_of_its_own(store: Store) -> None:
    await store.tenants.set(DEFAULTS, {"max_active": 3, "rate": 5.0})
    row = await store.tenants.set("acme", {"weight": 2.0})
    # a new row starts from the defaults, then takes the change
    assert row.limits == TenantLimits(weight=2.0, max_active=3, rate=5.0)
    await store.tenants.set(DEFAULTS, {"max_active": 7})
    limits = await store.tenants.effective(["acme", "globex"])
    assert limits["acme"].max_active == 3
    assert limits["globex"] == TenantLimits(max_active=7, rate=5.0)
    assert [r.tenant for r in await store.tenants.rows()] == [DEFAULTS, "acme"]
    assert await store.tenants.remove("acme")
    assert not await store.tenants.remove("acme")
    assert (await store.tenants.effective(["acme"]))["acme"].max_active == 7


async def test_null_lifts_a_limit(store: Store) -> None:
    await store.tenants.set("acme", {"max_active": 2, "on_budget": "park"})
    row = await store.tenants.set("acme", {"max_active": None})
    assert row.limits.max_active is None
    assert row.limits.on_budget == "park"


@pytest.mark.parametrize(
    "changes",
    [
        {"weight": 0},
        {"weight": float("nan")},
        {"weight": 5e-324},  # 1 / weight is infinite: the claims' passes could not advance
        {"weight": 1e-7},
        {"max_active": -1},
        {"max_active": 1.5},
        {"burst": 0},
        {"rate": 0},
        {"rate": 1e-320},  # Retry-After, (1 - tokens) / rate, past any whole number
        {"rate": 1e-7},
        {"rate": MAX_RATE + 1},  # a bucket of ceil(rate) tokens: past a count
        {"rate": 1e308},
        {"budget_period": 1e-300},  # now / period is infinite: every budget check failed
        {"budget_period": 0.5},
        {"on_budget": "shrug"},
        {"colour": "red"},
        {"max_queued": True},
        {"max_active": 2**31},  # past the column (integer): a 500 before
        {"max_queued": 2**31},
        {"burst": 2**31},
        {"tokens_per_period": 2**62},
    ],
)
async def test_invalid_limits_are_refused_before_anything_is_written(
    store: Store, changes: dict[str, object]
) -> None:
    with pytest.raises(LimitInvalid):
        await store.tenants.set("acme", changes)
    assert await store.tenants.row("acme") is None


async def test_the_largest_limits_are_stored(store: Store) -> None:
    top = {"max_active": 2**31 - 1, "max_queued": 2**31 - 1, "burst": 2**31 - 1, "rate": MAX_RATE}
    await store.tenants.set("acme", {**top, "tokens_per_period": 2**62 - 1})
    row = await store.tenants.row("acme")
    assert row is not None and row.limits.max_active == 2**31 - 1
    assert row.limits.tokens_per_period == 2**62 - 1
    with pytest.raises(LimitInvalid):
        await store.tenants.set_global_max_active(2**31)
    await store.tenants.set_global_max_active(2**31 - 1)


async def test_a_count_stored_past_the_bound_by_an_earlier_release_reads_as_the_bound(
    store: Store,
) -> None:
    """SQLite's integer took counts up to 2^62 before they were bounded by PostgreSQL's column:
    such a row must not fail every accept and claim that reads it."""
    if store.dialect != "sqlite":
        pytest.skip("PostgreSQL's integer column never held such a count")
    await store.tenants.set("acme", {"max_queued": 5})
    async with store.engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE tether_tenants SET max_queued = 3000000000 WHERE tenant = 'acme'")
        )
    row = await store.tenants.row("acme")
    assert row is not None and row.limits.max_queued == 2**31 - 1
    assert (await store.tenants.effective(["acme"]))["acme"].max_queued == 2**31 - 1


async def test_a_rate_stored_past_the_bound_by_an_earlier_release_reads_as_the_bound(
    store: Store,
) -> None:
    """A rate written before it was bounded (``3e9``): read as the bound, so the tenant's
    bucket fits again instead of refusing every accept."""
    await store.tenants.set("acme", {"rate": 5.0})
    async with store.engine.begin() as conn:
        await conn.execute(sa.text("UPDATE tether_tenants SET rate = 3e9 WHERE tenant = 'acme'"))
    row = await store.tenants.row("acme")
    assert row is not None and row.limits.rate == MAX_RATE
    assert row.limits.bucket_size == MAX_RATE


async def test_the_global_cap_is_one_row(store: Store) -> None:
    await store.tenants.set_global_max_active(10)
    await store.tenants.set_global_max_active(4)
    assert await store.tenants.global_max_active() == 4
    await store.tenants.set_global_max_active(None)
    assert await store.tenants.global_max_active() is None


async def test_an_invocation_belongs_to_its_owner_unless_mapped(store: Store) -> None:
    await store.accept(NewInvocation("a", "ann", None, {}, "h"))
    await store.accept(NewInvocation("b", "bob", None, {}, "h", tenant="acme", priority=5))
    a, b = await store.get("a"), await store.get("b")
    assert a is not None and b is not None
    assert (a.tenant, a.priority) == ("ann", 0)
    assert (b.tenant, b.priority) == ("acme", 5)
    claim = await store.claim("b", "host:1")
    assert claim is not None and claim.tenant == "acme"


CONCURRENT_CHANGES: list[dict[str, Any]] = [
    {"max_active": 3},
    {"max_queued": 40},
    {"rate": 5.0},
    {"burst": 9},
    {"weight": 2.0},
    {"tokens_per_period": 1000},
]


@pytest.mark.parametrize("existing", [False, True], ids=["first-write", "own-row"])
async def test_concurrent_changes_of_different_limits_all_land(
    store: Store, existing: bool
) -> None:
    """Each change writes its own limits only: a change read, edited and written back whole
    lost the others' (and two first writes raced to insert the row: a unique violation)."""
    if existing:
        await store.tenants.set("acme", {"on_budget": "park"})
    await asyncio.gather(*[store.tenants.set("acme", change) for change in CONCURRENT_CHANGES])
    row = await store.tenants.row("acme")
    assert row is not None
    expected = TenantLimits(on_budget="park" if existing else "fail").changed(
        {name: value for change in CONCURRENT_CHANGES for name, value in change.items()}
    )
    assert row.limits == expected


async def test_a_first_write_starts_from_the_defaults_and_keeps_its_own_changes(
    store: Store,
) -> None:
    await store.tenants.set(DEFAULTS, {"max_active": 3, "rate": 5.0})
    await asyncio.gather(
        store.tenants.set("acme", {"rate": None}), store.tenants.set("acme", {"burst": 2})
    )
    row = await store.tenants.row("acme")
    assert row is not None
    assert row.limits == TenantLimits(max_active=3, rate=None, burst=2)


async def change_behind(
    store: Store, migrated_pg: str, statement: str, tenant: str, changes: dict[str, Any]
) -> Any:
    """``store.tenants.set(tenant, changes)`` started while another transaction, which ran
    ``statement`` on the tenant's row, holds it; that transaction commits once the change waits
    for its lock. The change's row."""
    dsn = migrated_pg.replace("postgresql+psycopg://", "postgresql://", 1)
    async with await psycopg.AsyncConnection.connect(dsn) as other:
        await other.execute(statement, [tenant])
        changing = asyncio.create_task(store.tenants.set(tenant, changes))
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as watch:
            await until_a_lock_wait(watch)
        await other.commit()
        return await asyncio.wait_for(changing, 10)


async def test_a_change_waiting_behind_anothers_write_keeps_that_write(
    pg_store: Store, migrated_pg: str
) -> None:
    """PostgreSQL, the interleaving forced: another transaction changes ``max_active`` and
    holds the row; a change of ``weight`` that read the row before it committed waits for it,
    then writes its own limit only (a write of the whole row read earlier lost the other)."""
    store, tenant = pg_store, f"t-{uuid.uuid4()}"
    await store.tenants.set(tenant, {"max_active": 1})
    update = "UPDATE tether_tenants SET max_active = 9 WHERE tenant = %s"
    row = await change_behind(store, migrated_pg, update, tenant, {"weight": 3.0})
    assert (row.limits.max_active, row.limits.weight) == (9, 3.0)


async def test_a_change_racing_a_remove_starts_from_the_defaults(
    pg_store: Store, migrated_pg: str
) -> None:
    """PostgreSQL: a remove commits while a change waits; the change makes a new row from the
    defaults and its own limit, never bringing back the removed row's other limits."""
    store, tenant = pg_store, f"t-{uuid.uuid4()}"
    await store.tenants.set(tenant, {"max_active": 1, "max_queued": 5})
    remove = "DELETE FROM tether_tenants WHERE tenant = %s"
    row = await change_behind(store, migrated_pg, remove, tenant, {"weight": 3.0})
    defaults = await store.tenants.row(DEFAULTS)
    start = defaults.limits if defaults is not None else TenantLimits()
    assert row.limits == start.changed({"weight": 3.0})
