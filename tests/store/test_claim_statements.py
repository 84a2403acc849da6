"""What a claim sends the database, on both stores: few statement texts whatever the number of
tenants, and statuses written into the text, so the partial indexes apply without the
statement being prepared again (SQLite prepares again, on every execution, a statement whose
bound value decides whether a partial index applies)."""

from __future__ import annotations

import uuid
from typing import Any

from tests.store.executed import Executed, statements
from tether.status import OPEN
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
