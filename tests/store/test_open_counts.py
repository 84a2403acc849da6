"""The open counts behind the owner cap and a tenant's max_queued, on both stores: after every
kind of transition they equal a count of the rows, and on PostgreSQL accepts from two processes
at once never pass a cap while attempts end beside them."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest
import sqlalchemy as sa

from tether.outcomes import cancelled, completed
from tether.store.journal import NewWait, WaitKind
from tether.store.opencounts import RECOUNTS_KEPT, RecountPace
from tether.store.schema import NewInvocation, invocations, open_counts
from tether.store.store import (
    Accepted,
    FinishRequest,
    OwnerLimitReached,
    Store,
    TenantLimitReached,
)
from tether.store.writes import NewEvent

from .test_store_contract import age


def new(owner: str = "ann", tenant: str | None = None) -> NewInvocation:
    return NewInvocation(str(uuid.uuid4()), owner, None, [], "h", tenant=tenant)


async def kept(store: Store) -> dict[tuple[str, str], int]:
    """The counts the store keeps, zeros left out."""
    async with store.engine.connect() as conn:
        rows = await conn.execute(sa.select(open_counts))
        return {(r.scope, r.name): r.open_count for r in rows if r.open_count}


async def counted(store: Store) -> dict[tuple[str, str], int]:
    """The open rows, counted."""
    found: dict[tuple[str, str], int] = {}
    inv = invocations.c
    is_open = inv.status.in_(["queued", "active", "waiting"])
    async with store.engine.connect() as conn:
        for scope, column in (("owner", inv.owner), ("tenant", inv.tenant)):
            rows = await conn.execute(
                sa.select(column, sa.func.count()).where(is_open).group_by(column)
            )
            found.update({(scope, name): n for name, n in rows.all()})
    return found


async def assert_exact(store: Store) -> None:
    assert await kept(store) == await counted(store)


async def test_every_transition_keeps_the_counts_equal_to_the_rows(store: Store) -> None:
    a, b, c, d, e, beyond = (new("ann", "acme") for _ in range(6))
    batch = [a, b, c, new("bob"), d, e, beyond]
    results = await store.accept_many(batch, max_queued={"acme": 5})
    assert isinstance(results[-1], TenantLimitReached)
    assert await kept(store) == {("owner", "ann"): 5, ("tenant", "acme"): 5, **bob(1)}
    await store.accept(a)  # a repeated request opens nothing
    with pytest.raises(OwnerLimitReached):
        await store.accept(new("ann"), max_open_per_owner=5)
    await assert_exact(store)

    assert await store.claim(a.id, "w") is not None
    await store.finish(FinishRequest(a.id, 1, completed("done")))  # an attempt ends
    await store.request_cancel(b.id)  # a queued one is cancelled
    assert await store.claim(c.id, "w") is not None
    await store.request_cancel(c.id)  # an active one is flagged: still open
    await assert_exact(store)
    assert await kept(store) == {("owner", "ann"): 3, ("tenant", "acme"): 3, **bob(1)}
    await store.finish(FinishRequest(c.id, 1, cancelled()))

    assert await store.claim(d.id, "w") is not None
    wait = NewWait("w", WaitKind.INPUT, {"prompt": "ok?"}, None)
    tick = NewEvent("tick", {"type": "tick"})
    assert await store.parks.park(d.id, 1, [wait], [tick]) is not None  # waiting: open
    await assert_exact(store)
    await store.request_cancel(d.id)  # a waiting one is cancelled
    assert await store.claim(e.id, "w") is not None
    await age(store, e.id, "heartbeat_at", 60)
    assert await store.requeue_for_recovery(e.id, 1, 5, 0)  # a crash's replacement: open
    assert await store.claim(e.id, "w2") is not None
    await age(store, e.id, "heartbeat_at", 60)
    await store.finish(FinishRequest(e.id, 2, cancelled(), stale_after=5))  # the reaper ends it
    await assert_exact(store)
    assert await kept(store) == bob(1)


def bob(n: int) -> dict[tuple[str, str], int]:
    return {("owner", "bob"): n, ("tenant", "bob"): n}


async def test_an_ended_invocation_frees_its_place_under_the_cap(store: Store) -> None:
    first, second = new(), new()
    for item in (first, second):
        await store.accept(item, max_open_per_owner=2)
    with pytest.raises(OwnerLimitReached):
        await store.accept(new(), max_open_per_owner=2)
    assert await store.claim(first.id, "w") is not None
    await store.finish(FinishRequest(first.id, 1, completed(None)))
    await store.accept(new(), max_open_per_owner=2)
    await assert_exact(store)


async def test_rows_refused_in_a_batch_leave_no_count(store: Store) -> None:
    batch = [new("ann", "acme") for _ in range(6)]
    results = await store.accept_many(batch, max_open_per_owner=3, max_queued={"acme": 2})
    verdicts = [type(r).__name__ for r in results]
    # the owner's cap refuses the latest three, the tenant's one more of those left
    assert verdicts == ["Accepted"] * 2 + ["TenantLimitReached"] + ["OwnerLimitReached"] * 3
    assert await kept(store) == {("owner", "ann"): 2, ("tenant", "acme"): 2}
    await assert_exact(store)


async def test_a_recount_takes_in_rows_written_around_the_store(store: Store) -> None:
    await store.accept(new("ann"))
    async with store.engine.begin() as conn:
        await conn.execute(sa.delete(open_counts))
    await store.recount_open()
    assert await kept(store) == {("owner", "ann"): 1, ("tenant", "ann"): 1}


async def drift(store: Store, scope: str, name: str, open_count: int) -> None:
    """Set a count as something writing around the store would leave it."""
    async with store.engine.begin() as conn:
        await conn.execute(
            sa.update(open_counts)
            .where(open_counts.c.scope == scope, open_counts.c.name == name)
            .values(open_count=open_count)
        )


async def test_a_count_read_too_high_is_counted_again_before_it_refuses(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await store.accept(new("ann", "acme"), max_open_per_owner=2)
    await drift(store, "owner", "ann", 40)  # as if rows were deleted by hand
    await store.accept(new("ann", "acme"), max_open_per_owner=2)
    assert "open count of owner 'ann' read 41, its open rows are 2: corrected" in caplog.text
    await assert_exact(store)
    with pytest.raises(OwnerLimitReached):  # the true count refuses
        await store.accept(new("ann", "acme"), max_open_per_owner=2)
    await assert_exact(store)

    await drift(store, "tenant", "acme", 40)
    await store.accept(new("bob", "acme"), max_queued={"acme": 3})
    await assert_exact(store)
    assert await kept(store) == {("owner", "ann"): 2, ("tenant", "acme"): 3, ("owner", "bob"): 1}


async def test_a_refusal_that_the_rows_confirm_corrects_nothing(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    batch = [new("ann") for _ in range(4)]
    results = await store.accept_many(batch, max_open_per_owner=3)
    assert [type(r).__name__ for r in results] == ["Accepted"] * 3 + ["OwnerLimitReached"]
    assert "corrected" not in caplog.text
    await assert_exact(store)


def test_a_key_is_counted_again_at_most_once_per_pace() -> None:
    now = [0.0]
    pace = RecountPace(10.0, clock=lambda: now[0])
    ann, acme = ("owner", "ann"), ("tenant", "acme")
    assert pace.due([acme, ann, ann]) == [ann, acme]
    now[0] = 9.9
    assert pace.due([ann]) == []
    now[0] = 10.0
    assert pace.due([ann, acme]) == [ann, acme]


def test_the_pace_forgets_keys_counted_long_ago() -> None:
    now = [0.0]
    pace = RecountPace(1.0, clock=lambda: now[0])
    assert len(pace.due(("owner", str(n)) for n in range(RECOUNTS_KEPT + 1))) == RECOUNTS_KEPT + 1
    now[0] = 5.0
    assert pace.due([("owner", "new")]) == [("owner", "new")]
    assert len(pace) == 1


def test_keys_all_within_the_pace_are_swept_again_only_at_twice_as_many() -> None:
    now = [0.0]
    pace = RecountPace(10.0, clock=lambda: now[0])
    pace.due(("owner", str(n)) for n in range(RECOUNTS_KEPT + 1))
    pace.due([("owner", "a")])  # a sweep that forgets nothing: all counted within the pace
    now[0] = 20.0
    pace.due([("owner", "b")])  # past the pace, but under twice the kept: no sweep yet
    assert len(pace) == RECOUNTS_KEPT + 3
    pace.due(("tenant", str(n)) for n in range(RECOUNTS_KEPT))
    pace.due([("owner", "c")])  # past twice as many: the keys counted at 0 are forgotten
    assert len(pace) == RECOUNTS_KEPT + 2


async def test_two_processes_accepting_at_once_never_pass_the_cap(store: Store) -> None:
    """Each count's row is locked by the accept that changes it: two gateways' batches for one
    owner take turns, and attempts ending meanwhile (the worker's side) free places exactly."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite has one writer: accepts already take turns")
    cap = 40
    other = store.sibling()
    owners = ["ann", "bob", "cat"]
    try:
        seeded = [new(owners[k % 3]) for k in range(30)]  # the owners interleaved
        await store.accept_many(seeded, max_open_per_owner=cap)
        for item in seeded:
            assert await store.claim(item.id, "w") is not None

        async def accepts(gateway: Store, rounds: int) -> list[object]:
            verdicts: list[object] = []
            for n in range(rounds):
                batch = [new(owners[(n + k) % 3]) for k in range(6)]
                verdicts += await gateway.accept_many(batch, max_open_per_owner=cap)
            return verdicts

        async def endings() -> None:  # batches spanning the three owners, as a worker's
            for k in range(0, len(seeded), 6):
                chunk = seeded[k : k + 6][::-1]
                requests = [FinishRequest(item.id, 1, completed(None)) for item in chunk]
                await store.finish_many(requests)

        done = await asyncio.gather(accepts(store, 30), accepts(other, 30), endings())
        assert all(isinstance(v, Accepted | OwnerLimitReached) for v in done[0] + done[1])
        rows = await counted(store)
        assert all(rows["owner", owner] <= cap for owner in owners)  # none past its cap
        await accepts(other, 20)  # then every owner up to its cap, which the endings lowered
        await assert_exact(store)
        assert await kept(store) == {
            (scope, owner): cap for owner in owners for scope in ("owner", "tenant")
        }
    finally:
        await other.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_the_migration_counts_the_rows_already_open(kind: str, tmp_path: Path) -> None:
    with ExitStack() as stack:
        if kind == "sqlite":
            store = Store.embedded(str(tmp_path / "store.db"))
        else:
            from tests.services import private_migrated_database

            store = Store.postgres(stack.enter_context(private_migrated_database()), pool_size=2)
        try:
            await store.migrate()
            done, *still_open = [new("ann"), new("ann"), new("bob", "acme")]
            await store.accept_many([done, *still_open])
            assert await store.claim(done.id, "w") is not None
            await store.finish(FinishRequest(done.id, 1, completed(None)))
            async with store.engine.begin() as conn:  # as before the counts were kept
                await conn.execute(sa.text("DROP TABLE tether_open_counts"))
                await conn.execute(
                    sa.text("DELETE FROM tether_schema_migrations WHERE version = '0011'")
                )
            assert await store.migrate() == ["0011"]
            assert await kept(store) == {
                ("owner", "ann"): 1,
                ("tenant", "ann"): 1,
                ("owner", "bob"): 1,
                ("tenant", "acme"): 1,
            }
        finally:
            await store.close()


async def test_tether_migrate_recount_counts_the_rows_again() -> None:
    from tests.harness import Launch
    from tests.services import private_migrated_database

    with private_migrated_database() as url:
        store = Store.postgres(url, pool_size=1)
        try:
            await store.accept_many([new("ann"), new("ann", "acme")])
            async with store.engine.begin() as conn:  # as if written by an older version
                await conn.execute(sa.delete(open_counts))
            launch = Launch()
            command = await asyncio.create_subprocess_exec(
                *launch.command,
                "migrate",
                "--recount",
                cwd=launch.cwd,
                env=launch.env({"TETHER_DATABASE_URL": url}),
                stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await asyncio.wait_for(command.communicate(), 60)
            assert command.returncode == 0
            assert "open invocations again" in out.decode()
            assert await kept(store) == {
                ("owner", "ann"): 2,
                ("tenant", "ann"): 1,
                ("tenant", "acme"): 1,
            }
        finally:
            await store.close()
