"""The planner's statistics after a quiet spell (PostgreSQL): analyzed while nothing was queued,
they say nothing is, whatever the backlog since. The reaper's check finds the planner's belief far
too low and analyzes the table; a claim's flip finds its rows by key whatever the planner
believes."""

from __future__ import annotations

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
    MIN_GAP_S,
    PlannerStatistics,
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
    check = await store.statistics.check()
    assert check is not None and check.analyzed and check.permitted
    [short] = check.short
    assert (short.status, round(short.believed), short.counted) == ("queued", 1, FLOOR)
    assert believed_queued(quiet_spell) > QUEUED / 2
    assert "the planner believed 1 queued where 1000+ are" in caplog.text
    assert await store.statistics.check() is None  # this process analyzed it a moment ago

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

    again = PlannerStatistics(store.db)  # another process: the planner knows the backlog now
    assert await again.check() == type(check)()


async def test_an_analyze_that_fixes_nothing_waits_longer_each_time(store: Store) -> None:
    """A status too rare for the sample to find (here: the sample is made to find none)."""
    now = [0.0]
    keeper = PlannerStatistics(store.db, clock=lambda: now[0])
    async with store.engine.begin() as conn:
        await conn.execute(sa.text("ALTER TABLE tether_invocations ALTER status SET STATISTICS 0"))
    try:
        first = await keeper.check()
        assert first is not None and first.analyzed
        gaps = []
        for _ in range(3):
            waited = 0.0
            while (check := await keeper.check()) is None:
                waited += MIN_GAP_S / 2
                now[0] += MIN_GAP_S / 2
            assert check.analyzed and check.short
            gaps.append(waited)
        assert gaps == [2 * MIN_GAP_S, 4 * MIN_GAP_S, 8 * MIN_GAP_S]
    finally:
        async with store.engine.begin() as conn:
            await conn.execute(
                sa.text("ALTER TABLE tether_invocations ALTER status SET STATISTICS -1")
            )


async def test_a_role_that_may_not_analyze_is_told_once(
    quiet_spell: str, caplog: pytest.LogCaptureFixture
) -> None:
    role = f"tether_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(plain(quiet_spell), autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
    reader = Store.postgres(quiet_spell.replace("://postgres@", f"://{role}@", 1), pool_size=1)
    try:
        first, second = await reader.statistics.check(), await reader.statistics.check()
        assert first is not None and not first.analyzed and not first.permitted
        assert second is not None and not second.permitted
        assert caplog.text.count("may not ANALYZE tether_invocations") == 1
        assert believed_queued(quiet_spell) < 10  # nothing was analyzed
    finally:
        await reader.close()
        with psycopg.connect(plain(quiet_spell), autocommit=True) as conn:
            conn.execute(f'REVOKE ALL ON ALL TABLES IN SCHEMA public FROM "{role}"')
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
