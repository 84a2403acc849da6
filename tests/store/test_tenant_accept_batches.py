"""Grouped accepts and tenants' buckets, on both stores: a group of concurrent accepts takes each
rate-limited tenant's tokens with one statement, the bucket grants exactly what it held across
groups, and a tenant without a rate pays nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from tether.channels import QUEUED_CHANNEL, queued_tenants
from tether.gateway.accept import Acceptor, TenantRateLimited
from tether.pubsub import MemoryPubSub
from tether.queue import Queue
from tether.store.schema import NewInvocation
from tether.store.store import Accepted, Store


class Sent:
    """A transport that keeps what it was asked to send."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    async def send(self, invocation_ids: Sequence[str], delay: float) -> None:
        self.ids.extend(invocation_ids)

    async def waiting(self) -> int:
        return len(self.ids)

    async def close(self) -> None:
        return None


def bucket_statements(store: Store) -> list[int]:
    """Statements touching tether_tenant_buckets, counted as they run."""
    seen: list[int] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "tether_tenant_buckets" in statement:
            seen.append(1)

    for engine in store.db.statement_engines:
        sa.event.listen(engine, "before_cursor_execute", count)
    return seen


def new(owner: str) -> NewInvocation:
    return NewInvocation(str(uuid.uuid4()), owner, None, [], "h")


async def test_a_group_of_accepts_takes_each_tenants_tokens_in_one_statement(
    store: Store,
) -> None:
    await store.tenants.set("acme", {"rate": 0.001, "burst": 5})
    await store.tenants.set("globex", {"rate": 0.001, "burst": 50})
    sent = Sent()
    acceptor = Acceptor(store, Queue(sent), 0)
    statements = bucket_statements(store)
    takes: list[list[str]] = []
    take = store.buckets.take

    async def recorded(wants: Any, now: float | None = None) -> Any:
        takes.append(sorted(wants))
        return await take(wants, now)

    store.buckets.take = recorded  # type: ignore[method-assign]
    requests = [new("acme") for _ in range(12)] + [new("globex") for _ in range(12)]
    requests += [new("initech") for _ in range(6)]  # no rate: no bucket
    results = await asyncio.gather(
        *[acceptor.accept(item) for item in requests], return_exceptions=True
    )
    by_owner: dict[str, list[str]] = {}
    for item, result in zip(requests, results, strict=True):
        verdict = "accepted" if isinstance(result, Accepted) else type(result).__name__
        by_owner.setdefault(item.owner, []).append(verdict)
    assert by_owner["acme"].count("accepted") == 5  # its burst, never more
    assert by_owner["acme"].count(TenantRateLimited.__name__) == 7
    assert by_owner["globex"] == ["accepted"] * 12
    assert by_owner["initech"] == ["accepted"] * 6
    assert len(sent.ids) == 23
    refused = [r for r in results if isinstance(r, TenantRateLimited)]
    assert all(r.tenant == "acme" and r.retry_after >= 1 for r in refused)
    # one statement per rate-limited tenant of each group, and the groups were groups
    assert len(statements) == sum(len(tenants) for tenants in takes)
    assert all(set(tenants) <= {"acme", "globex"} for tenants in takes)
    assert len(takes) < len(requests)
    assert await store.buckets.tokens("initech") is None
    for item, result in zip(requests, results, strict=True):
        if isinstance(result, TenantRateLimited):
            assert await store.get(item.id) is None


async def test_a_group_of_accepts_announces_its_tenants_once_after_sending_their_tokens(
    store: Store,
) -> None:
    """Workers learn of a tenant's new work from the announcement, not only from its tokens,
    which may wait behind another tenant's flood in the broker."""
    pubsub = MemoryPubSub()
    sent = Sent()
    acceptor = Acceptor(store, Queue(sent), 0, pubsub=pubsub)
    async with pubsub.subscribe(QUEUED_CHANNEL) as sub:
        requests = [new("acme") for _ in range(3)] + [new("globex") for _ in range(2)]
        await asyncio.gather(*[acceptor.accept(item) for item in requests])
        heard: list[str] = []
        while (message := await sub.get(timeout=0.05)) is not None:
            assert isinstance(message, str), message
            heard.append(message)
        await acceptor.accept(requests[0])  # a repeat creates nothing: nothing announced
        assert await sub.get(timeout=0.05) is None
    # one message a group (concurrent accepts: one or two), naming each of its tenants once
    assert 1 <= len(heard) <= 2, heard
    groups = [queued_tenants(message) for message in heard]
    assert all(len(names) == len(set(names)) for names in groups), groups
    assert {tenant for names in groups for tenant in names} == {"acme", "globex"}
    assert len(sent.ids) == 5
