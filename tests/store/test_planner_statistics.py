"""The planner's statistics after a quiet spell (PostgreSQL): analyzed while nothing was queued,
they say nothing is, whatever the backlog since. The reaper's check finds the planner's belief far
too low and analyzes the table; a claim's flip finds its rows by key whatever the planner
believes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from tests.services import PG_ADMIN_URL, private_migrated_database
from tests.store.executed import Executed, statements
from tether.store.planner_statistics import (
    CEILING,
    FACTOR,
    FLOOR,
    PlannerStatistics,
    StatisticsCheck,
    _survey,
    count_up_to,
)
from tether.store.store import Store

QUEUED_BY_TIME = "tether_invocations_queued_enqueued"
"""The index of every queued row by ``enqueued_at``: the reaper's, no claim's."""
QUEUED = 5_000
TENANTS = 64


def plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@pytest.fixture
def quiet_spell() -> Iterator[str]:
    """A database analyzed with 5,000 finished invocations and nothing queued, then given
    5,000 queued over 64 tenants: what a backlog after a quiet spell finds."""
    with private_migrated_database() as url:
        with psycopg.connect(plain(url), autocommit=True) as conn:
            # only the tests analyze it (where autovacuum runs, it might before they look)
            conn.execute("ALTER TABLE tether_invocations SET (autovacuum_enabled = off)")
            conn.execute(
                "INSERT INTO tether_invocations (id, owner, tenant, input, request_hash, status,"
                " created_at, enqueued_at, started_at, finished_at)"
                " SELECT 'done-' || g, 'o' || (g % 50), 'o' || (g % 50), '{}', 'h', 'completed',"
                " 1, 1, 1, 2 FROM generate_series(1, 5000) AS g"
            )
            conn.execute("VACUUM ANALYZE")
            conn.execute(
                "INSERT INTO tether_invocations (id, owner, tenant, input, request_hash, status,"
                " created_at, enqueued_at) SELECT 'q-' || g, 't' || (g %% %s), 't' || (g %% %s),"
                " '{}', 'h', 'queued', 1, 1 FROM generate_series(1, %s) AS g",
                (TENANTS, TENANTS, QUEUED),
            )
            conn.execute("SELECT pg_stat_force_next_flush()")  # the changes, counted at once
        yield url


@pytest.fixture
async def store(quiet_spell: str) -> AsyncIterator[Store]:
    s = Store.postgres(quiet_spell, pool_size=1)
    try:
        yield s
    finally:
        await s.close()


async def plans(store: Store, seen: list[Executed]) -> list[dict[str, Any]]:
    """The plan of each statement in ``seen`` that reads or writes the invocations."""
    found = []
    async with store.engine.connect() as conn:
        for executed in seen:
            if "tether_invocations" in executed.text:
                sql = f"EXPLAIN (FORMAT JSON) {executed.text}"
                (document,) = (await conn.exec_driver_sql(sql, executed.params)).scalar_one()
                found.append(document["Plan"])
    return found


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def believed_queued(url: str) -> float:
    with psycopg.connect(plain(url)) as conn:
        row = conn.execute(
            "EXPLAIN (FORMAT JSON) SELECT 1 FROM tether_invocations WHERE status = 'queued'"
        ).fetchone()
    assert row is not None
    return float(row[0][0]["Plan"]["Plan Rows"])


def test_a_status_is_counted_up_to_what_proves_the_belief_far_too_low() -> None:
    assert count_up_to(1) == FLOOR
    assert count_up_to(FLOOR) == FACTOR * FLOOR
    assert count_up_to(CEILING - 1) == FACTOR * (CEILING - 1)
    assert count_up_to(CEILING) is None  # the planner already plans for a large set


async def test_a_claim_flips_its_heads_by_key_whatever_the_planner_believes(
    quiet_spell: str, store: Store
) -> None:
    assert believed_queued(quiet_spell) < 10  # the statistics of the quiet spell
    with statements(store) as seen:
        claims = await store.claim_next(32, "w-quiet")
    assert len(claims) == 32
    flips = [p for p in await plans(store, seen) if p["Node Type"] == "ModifyTable"]
    assert flips, seen
    for flip in flips:
        (found,) = [p for p in flip["Plans"] if p["Parent Relationship"] != "InitPlan"]
        indexes = {n["Index Name"] for n in nodes(found) if "Index Name" in n}
        sequential = [n for n in nodes(found) if n["Node Type"] == "Seq Scan"]
        assert indexes == {"tether_invocations_pkey"} and not sequential, json.dumps(flip)


async def test_the_check_analyzes_a_backlog_the_planner_does_not_know_of(
    quiet_spell: str, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "tether.store.planner_statistics")
    keeper = PlannerStatistics(store.db, min_gap=0.0)  # the quiet spell's ANALYZE: long ago
    check = await keeper.check()
    assert check is not None and check.analyzed and check.permitted
    [short] = check.short
    assert (short.status, round(short.believed), short.counted) == ("queued", 1, FLOOR)
    assert believed_queued(quiet_spell) > QUEUED / 2
    assert "the planner believed 1 queued where 1000+ are" in caplog.text
    assert await keeper.check() == StatisticsCheck()  # the planner knows it now

    with statements(store) as seen:
        assert len(await store.claim_next(32, "w-quiet")) == 32
    explained = await plans(store, seen)
    assert len(explained) >= 2  # the tenants with queued work, and the flip of their heads
    for plan in explained:
        where = json.dumps(plan, indent=1)
        assert all(n.get("Index Name") != QUEUED_BY_TIME for n in nodes(plan)), where
        scans = [
            n
            for n in nodes(plan)
            if n["Node Type"].endswith("Scan") and n.get("Relation Name") == "tether_invocations"
        ]
        assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), where

    again = PlannerStatistics(store.db)  # another process: nothing left to do
    assert await again.check() == StatisticsCheck()


@contextlib.contextmanager
def status_unsampled(url: str) -> Iterator[None]:
    """ANALYZE stops taking statistics on the status (those it took stay): a status too rare
    in a huge table for the sample to find, as far as the planner's belief goes."""
    with psycopg.connect(plain(url), autocommit=True) as conn:
        conn.execute("ALTER TABLE tether_invocations ALTER status SET STATISTICS 0")
    try:
        yield
    finally:
        with psycopg.connect(plain(url), autocommit=True) as conn:
            conn.execute("ALTER TABLE tether_invocations ALTER status SET STATISTICS -1")


async def test_an_analyze_that_fixes_nothing_waits_longer_each_time(
    quiet_spell: str, store: Store
) -> None:
    """Each gap counts from the table's last ANALYZE on the database's clock."""
    gap = 0.25
    keeper = PlannerStatistics(store.db, min_gap=gap)
    with status_unsampled(quiet_spell):
        await asyncio.sleep(gap)  # since the quiet spell's ANALYZE
        first = await keeper.check()
        assert first is not None and first.analyzed and first.gap == 2 * gap
        # believed almost empty, the status is counted at every check: still short, it waits
        held = await keeper.check()
        assert held is not None and held.short and not held.analyzed and held.gap == 2 * gap
        gaps = [first.gap]
        for _ in range(3):
            held = await keeper.check()  # within the gap: the same shortfall waits
            assert held is not None and held.short and not held.analyzed, held
            while not (check := await keeper.check()) or not check.analyzed:
                assert check is not None and check.short
                await asyncio.sleep(gap / 4)
            gaps.append(check.gap)
        assert gaps == [2 * gap, 4 * gap, 8 * gap, 16 * gap]


async def test_a_status_believed_large_is_counted_only_after_enough_changes(
    store: Store,
) -> None:
    """Counting 10x a belief of 5,000 would read 50,000 rows at every check: only once the
    table has changed enough since the last ANALYZE for the status to have grown that far. A
    status believed almost empty is counted (to 1,000) at every check."""
    async with store.engine.connect() as conn:
        await conn.execute(sa.text("ANALYZE tether_invocations"))  # the backlog known
        await conn.commit()
    async with store.db.connection() as conn:
        _, counted = await _survey(conn, 0.0)
        assert counted == {"active", "waiting"}
        _, counted = await _survey(conn, float(10 * QUEUED))
        assert counted == {"queued", "active", "waiting"}


async def test_an_analyze_of_a_moment_ago_is_not_repeated(quiet_spell: str, store: Store) -> None:
    """Another process's (or autovacuum's) ANALYZE within the least gap: this one waits."""
    keeper = PlannerStatistics(store.db)
    with status_unsampled(quiet_spell):
        async with store.engine.connect() as conn:
            await conn.execute(sa.text("ANALYZE tether_invocations"))  # and still short
            await conn.commit()
        check = await keeper.check()
        assert check is not None and check.short and not check.analyzed


async def test_an_analyze_that_a_lock_skips_is_not_counted(quiet_spell: str, store: Store) -> None:
    """``ANALYZE (SKIP_LOCKED)`` waits for no lock: a VACUUM or an index build holding the
    table makes it skip the table, and the next check tries again."""
    keeper = PlannerStatistics(store.db, min_gap=0.0)
    with psycopg.connect(plain(quiet_spell)) as holder:
        holder.execute("LOCK TABLE tether_invocations IN SHARE UPDATE EXCLUSIVE MODE")
        skipped = await keeper.check()
        assert skipped is not None and skipped.short and not skipped.analyzed
        holder.rollback()
    check = await keeper.check()
    assert check is not None and check.analyzed


async def test_counters_reset_count_every_status(quiet_spell: str, store: Store) -> None:
    """After a crash or ``pg_stat_reset()`` the changes since the last ANALYZE start from 0
    while the statistics stay as they were: every status is counted until an ANALYZE."""
    with psycopg.connect(plain(quiet_spell), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_reset()")
    check = await store.statistics.check()
    assert check is not None and check.analyzed


async def test_a_role_that_may_not_analyze_is_told_once(
    quiet_spell: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The same login acting as a role that owns nothing (``SET ROLE`` at connect)."""
    role = f"tether_reader_{uuid.uuid4().hex[:8]}"
    url = sa.make_url(quiet_spell).update_query_dict({"options": f"-c role={role}"})
    reader = None
    try:
        with psycopg.connect(plain(quiet_spell), autocommit=True) as conn:
            conn.execute(f'CREATE ROLE "{role}" NOLOGIN')
            conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
        reader = Store.postgres(url.render_as_string(hide_password=False), pool_size=1)
        keeper = PlannerStatistics(reader.db, min_gap=0.0)  # the quiet spell's: long ago
        first, second = await keeper.check(), await keeper.check()
        assert first is not None and not first.analyzed and not first.permitted
        assert second is None  # not again until MAX_GAP_S has passed
        assert caplog.text.count("may not ANALYZE tether_invocations") == 1
        assert believed_queued(quiet_spell) < 10  # nothing was analyzed
    finally:
        if reader is not None:
            await reader.close()
        with psycopg.connect(plain(quiet_spell), autocommit=True) as conn:
            conn.execute(f'REVOKE ALL ON ALL TABLES IN SCHEMA public FROM "{role}"')
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
