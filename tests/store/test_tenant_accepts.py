"""The accept side of tenants on both stores: token buckets (an injected clock: no timing), the
max_queued cap beside the owner cap, and the open counts behind the metrics and the admin API."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tether.store.buckets import Want
from tether.store.schema import NewInvocation, Status
from tether.store.store import OwnerLimitReached, Store, TenantLimitReached
from tether.store.tenants import MAX_RATE, OpenCounts, TenantLimits


def new(owner: str, tenant: str | None = None, priority: int = 0) -> NewInvocation:
    return NewInvocation(str(uuid.uuid4()), owner, None, [], "h", tenant=tenant, priority=priority)


async def test_a_new_bucket_starts_full_and_grants_what_it_holds(store: Store) -> None:
    grants = await store.buckets.take({"acme": Want(count=5, rate=1.0, size=3)}, now=100.0)
    assert grants["acme"].granted == 3
    assert grants["acme"].tokens == 0.0
    assert grants["acme"].retry_after == 1


async def test_a_bucket_refills_at_its_rate_up_to_its_size(store: Store) -> None:
    want = Want(count=10, rate=2.0, size=4)
    assert (await store.buckets.take({"acme": want}, now=0.0))["acme"].granted == 4
    # 1.25 s at 2/s: 2.5 tokens, two whole ones
    again = (await store.buckets.take({"acme": want}, now=1.25))["acme"]
    assert again.granted == 2
    assert again.tokens == pytest.approx(0.5)
    assert again.retry_after == 1
    # an hour later it holds its size, no more
    assert (await store.buckets.take({"acme": want}, now=3600.0))["acme"].granted == 4


async def test_a_take_within_the_tokens_leaves_the_rest(store: Store) -> None:
    want = Want(count=2, rate=0.1, size=5)
    first = (await store.buckets.take({"acme": want}, now=0.0))["acme"]
    assert (first.granted, first.tokens) == (2, 3.0)
    second = (await store.buckets.take({"acme": want}, now=0.0))["acme"]
    assert (second.granted, second.tokens) == (2, 1.0)
    third = (await store.buckets.take({"acme": want}, now=0.0))["acme"]
    assert (third.granted, third.tokens) == (1, 0.0)
    assert third.retry_after == 10  # one token at 0.1/s


async def test_tenants_have_buckets_of_their_own(store: Store) -> None:
    wants = {"acme": Want(1, 1.0, 1), "globex": Want(1, 1.0, 1)}
    assert {t: g.granted for t, g in (await store.buckets.take(wants, now=0.0)).items()} == {
        "acme": 1,
        "globex": 1,
    }
    assert (await store.buckets.take({"acme": Want(1, 1.0, 1)}, now=0.0))["acme"].granted == 0
    assert await store.buckets.tokens("acme") == 0.0
    assert await store.buckets.tokens("initech") is None


async def test_concurrent_takes_never_grant_more_than_the_bucket_held(store: Store) -> None:
    want = Want(count=3, rate=0.001, size=10)
    await store.buckets.take({"acme": Want(count=0, rate=0.001, size=10)}, now=0.0)
    grants = await asyncio.gather(*[store.buckets.take({"acme": want}, now=0.0) for _ in range(8)])
    assert sum(g["acme"].granted for g in grants) == 10


async def test_a_tenant_over_max_queued_is_refused_and_nothing_of_it_is_written(
    store: Store,
) -> None:
    first = [new("alice", "acme"), new("bob", "acme")]
    results = await store.accept_many(first, max_queued={"acme": 2})
    assert all(not isinstance(r, Exception) for r in results)
    refused = new("carol", "acme")
    results = await store.accept_many([refused, new("dave", "globex")], max_queued={"acme": 2})
    assert isinstance(results[0], TenantLimitReached) and results[0].tenant == "acme"
    assert not isinstance(results[1], Exception)
    assert await store.get(refused.id) is None
    # a tenant without a cap, and a zero cap refusing everything
    assert not isinstance((await store.accept_many([new("eve")], max_queued={}))[0], Exception)
    [zero] = await store.accept_many([new("frank", "initech")], max_queued={"initech": 0})
    assert isinstance(zero, TenantLimitReached)


async def test_max_queued_refuses_the_latest_of_a_batch(store: Store) -> None:
    batch = [new(f"user{n}", "acme") for n in range(5)]
    results = await store.accept_many(batch, max_queued={"acme": 3})
    assert [isinstance(r, TenantLimitReached) for r in results] == [False] * 3 + [True] * 2


async def test_the_owner_cap_and_the_tenant_cap_are_one_rule_counted_twice(store: Store) -> None:
    batch = [new("alice", "acme"), new("alice", "acme"), new("bob", "acme"), new("carol", "acme")]
    results = await store.accept_many(batch, max_open_per_owner=1, max_queued={"acme": 2})
    # alice's second is over her own cap; it is not counted against the tenant, so bob passes
    assert isinstance(results[1], OwnerLimitReached)
    assert not isinstance(results[0], Exception) and not isinstance(results[2], Exception)
    assert isinstance(results[3], TenantLimitReached)


async def test_a_repeated_request_passes_a_full_tenant(store: Store) -> None:
    first = new("alice", "acme")
    await store.accept_many([first], max_queued={"acme": 1})
    [again] = await store.accept_many([first], max_queued={"acme": 1})
    assert not isinstance(again, Exception) and not again.created


async def test_open_counts_group_by_tenant_and_status(store: Store) -> None:
    ids = []
    for owner, tenant in [("a", "acme"), ("b", "acme"), ("c", "globex")]:
        item = new(owner, tenant, priority=3)
        ids.append(item.id)
        await store.accept(item)
    claimed = await store.claim(ids[0], "worker-1")
    assert claimed is not None
    counts = await store.tenants.open_counts()
    assert counts == {"acme": OpenCounts(queued=1, running=1), "globex": OpenCounts(queued=1)}
    assert await store.tenants.open_counts(["globex", "nobody"]) == {"globex": OpenCounts(1)}
    invocation = await store.get(ids[2])
    assert invocation is not None
    assert (invocation.tenant, invocation.priority, invocation.status) == (
        "globex",
        3,
        Status.QUEUED,
    )


@pytest.mark.parametrize(
    "want",
    [
        Want(count=1, rate=3e9, size=3e9),  # a bucket past PostgreSQL's integer
        Want(count=1, rate=1e308, size=5),  # a refill past any float
        Want(count=1, rate=MAX_RATE, size=TenantLimits(rate=MAX_RATE).bucket_size),
    ],
    ids=["size-past-int4", "rate-past-float", "largest-limits"],
)
async def test_a_bucket_of_any_rate_or_size_keeps_granting(store: Store, want: Want) -> None:
    """The first take inserts the bucket; each later one refills it: no step of that may
    overflow, or the tenant's every accept after its first was a 422 (found by QA)."""
    for now in (0.0, 2.0, 1e9):
        grant = (await store.buckets.take({"acme": want}, now=now))["acme"]
        assert grant.granted == 1
        assert grant.tokens == pytest.approx(want.size - 1)
