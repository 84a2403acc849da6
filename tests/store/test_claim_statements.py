"""What a claim sends the database, on both stores: few statement texts whatever the number of
tenants, and statuses written into the text, so the partial indexes apply without the
statement being prepared again (SQLite prepares again, on every execution, a statement whose
bound value decides whether a partial index applies)."""

from __future__ import annotations

import uuid
from typing import Any

from tests.store.executed import Executed, statements
from tether.status import OPEN
from tether.store.candidates import QueuedTenants
from tether.store.heads import UNION_BRANCHES
from tether.store.schema import NewInvocation
from tether.store.store import Store


async def queue(store: Store, tenants: list[str], each: int = 1) -> None:
    news = [
        NewInvocation(str(uuid.uuid4()), "ann", None, {}, "h", tenant=tenant)
        for tenant in tenants
        for _ in range(each)
    ]
    await store.accept_many(news)


def flips(seen: list[Executed]) -> list[str]:
    return [e.text for e in seen if e.text.lstrip().upper().startswith("UPDATE")]


def strings(params: Any) -> set[str]:
    """Every string among a statement's parameters (named, positional, or a list of either)."""
    items = params.values() if isinstance(params, dict) else params
    if not isinstance(items, list | tuple | type({}.values())):
        items = [items]
    found: set[str] = set()
    for value in items:
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, dict | list | tuple):
            found |= strings(value)
    return found


async def test_claims_over_any_number_of_tenants_share_a_few_statement_texts(
    store: Store,
) -> None:
    texts: set[str] = set()
    for count in range(1, 10):
        tenants = [f"t{count}-{k}" for k in range(count)]
        await queue(store, tenants)
        with statements(store) as seen:
            claims = await store.claim_next(count, "w")
        assert sorted(c.tenant for c in claims) == sorted(tenants)
        texts.update(flips(seen))
    # SQLite: one text per power of two (1, 2, 4, 8, 16); PostgreSQL: one.
    assert len(texts) <= 5


async def test_padding_claims_nothing_beyond_what_each_tenant_was_given(store: Store) -> None:
    await queue(store, ["a", "b", "c"], each=3)
    claims = await store.claim_next(3, "w")  # three tenants: padded to four branches
    assert sorted(c.tenant for c in claims) == ["a", "b", "c"]
    more = await store.claim_next(10, "w")
    assert sorted(c.tenant for c in more) == ["a", "a", "b", "b", "c", "c"]
    assert await store.claim_next(10, "w") == []


async def test_a_claim_binds_no_status_its_predicates_compare(store: Store) -> None:
    await queue(store, ["a", "b"], each=2)
    with statements(store) as seen:
        assert len(await store.claim_next(4, "w")) == 4
    assert seen
    compared = {"queued", "waiting"}  # ``active`` is bound as the value the flip sets
    assert set(OPEN) >= compared
    for text, params, _ in seen:
        assert not compared & strings(params), text


async def test_a_claim_naming_more_tenants_than_one_statement_holds_starts_them_all(
    store: Store,
) -> None:
    tenants = [f"many-{k:03d}" for k in range(UNION_BRANCHES + 44)]  # 300: two statements
    await queue(store, tenants, each=2)
    claims = await store.claim_next(len(tenants), "w")
    assert sorted(c.tenant for c in claims) == sorted(tenants)  # one each: the fair share
    assert len(await store.claim_next(len(tenants), "w")) == len(tenants)
    assert await store.claim_next(10, "w") == []


async def test_a_claim_from_the_tenant_list_reads_only_tenants_with_queued_work(
    store: Store,
) -> None:
    """The list of tenants a process last scanned outlives their queues. Read as candidates,
    its drained tenants were given the slots first (as low on passes as anyone), found empty
    one round after another, up to the round limit, before a scan found the work. Where
    probes are cheap (SQLite) the list's read leaves them out; on PostgreSQL the rounds are
    the price of not probing every listed tenant at every claim of a deep backlog."""
    store._claims._queued = QueuedTenants(clock=lambda: 0.0)  # the list stays fresh
    tenants = [f"t{k}" for k in range(20)]
    await queue(store, tenants)
    assert len(await store.claim_next(20, "w")) == 20  # all filled: the list is trusted
    await queue(store, ["t5", "t6"])
    with statements(store) as seen:
        claims = await store.claim_next(2, "w")
    assert sorted(c.tenant for c in claims) == ["t5", "t6"]
    if store.db.dialect.probes_listed_tenants:
        assert len(flips(seen)) == 1
        assert not any("WITH RECURSIVE" in e.text for e in seen)  # no scan was needed
