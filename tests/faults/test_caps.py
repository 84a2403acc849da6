"""Concurrency caps across real ``tether worker`` processes (PostgreSQL + Redis), checked from
the store's own record: each attempt runs from its ``run.started`` event to its terminal event
(or, for an attempt whose worker was killed, to its replacement's ``run.started``, which can only
overstate the overlap)."""

from __future__ import annotations

import os
import signal
from collections import defaultdict
from collections.abc import Mapping

import pytest

from tests.client import Api, new_id
from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import (
    TERMINAL_EVENTS,
    Db,
    api_for,
    holding,
    owner_of,
    start_workers,
    until,
    worker_pid,
)
from tether.store.store import Store

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]


def attempt_spans(db: Db, ids: list[str]) -> list[tuple[float, float]]:
    """(start, end) of every attempt of these invocations, on the database clock."""
    rows = db.query(
        "SELECT invocation_id, type, data, created_at FROM tether_events "
        "WHERE invocation_id = ANY(%s) ORDER BY invocation_id, cursor",
        [ids],
    )
    by_invocation: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in rows:
        by_invocation[str(row["invocation_id"])].append(row)
    spans = []
    for events in by_invocation.values():
        starts = [float(e["created_at"]) for e in events if e["type"] == "run.started"]  # type: ignore[arg-type]
        [end] = [float(e["created_at"]) for e in events if e["type"] in TERMINAL_EVENTS]  # type: ignore[arg-type]
        spans += list(zip(starts, [*starts[1:], end], strict=True))
    return spans


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one moment (an end at the same instant as a start comes first)."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


async def post_all(api: Api, count: int, spec: Mapping[str, object]) -> list[str]:
    ids = [new_id() for _ in range(count)]
    for invocation_id in ids:
        status, _ = await api.post({"id": invocation_id, "input": spec, "background": True})
        assert status == 202
    return ids


async def limits(url: str, caps: dict[str, int], global_cap: int | None = None) -> None:
    store = Store.postgres(url, pool_size=1)
    try:
        for tenant, cap in caps.items():
            await store.tenants.set(tenant, {"max_active": cap})
        await store.tenants.set_global_max_active(global_cap)
    finally:
        await store.close()


async def test_tenant_and_global_caps_hold_across_two_worker_processes(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url, TETHER_WORKER__CONCURRENCY="4")
    _, base = cluster.start_gateway()
    start_workers(cluster, 2)  # 8 slots in all, more than either cap
    db = Db(fresh_db)
    async with api_for(base) as capped:
        other = Api(capped.session, base)
        await limits(fresh_db, {capped.owner: 2}, global_cap=5)
        work = {"emit": 1, "sleep": 0.2}
        ids = await post_all(capped, 12, work) + await post_all(other, 12, work)
        await until(lambda: db.all_match(ids, lambda r: r["status"] == "completed"), 90, "all")
    assert most_at_once(attempt_spans(db, ids[:12])) <= 2
    assert most_at_once(attempt_spans(db, ids)) <= 5
    assert len({r["worker"] for r in db.rows(ids).values()}) == 2  # both processes claimed


async def test_a_cap_holds_while_a_killed_workers_runs_are_replaced(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url)
    _, base = cluster.start_gateway()
    [doomed] = start_workers(cluster, 1)
    db = Db(fresh_db)
    hold_then_finish = {"attempt1": {"emit": 1, "sleep": 300}, "default": {"sleep": 0.2}}
    async with api_for(base) as api:
        await limits(fresh_db, {api.owner: 2})
        # the first two claimed (FIFO within the tenant) hold until killed; the rest wait
        ids = await post_all(api, 2, hold_then_finish) + await post_all(api, 4, {"sleep": 0.2})

        def two_holding() -> list[str] | None:
            found = [i for i, r in db.rows(ids).items() if holding(2)(r)]
            return found if len(found) == 2 else None

        held = await until(two_holding, 30, "two runs holding, the tenant at its cap")
        start_workers(cluster, 1)
        [pid] = {worker_pid(db.row(i)) for i in held}
        assert owner_of(pid, [doomed]) is doomed
        os.kill(pid, signal.SIGKILL)
        await until(lambda: db.all_match(ids, lambda r: r["status"] == "completed"), 90, "all")
    assert {db.row(i)["attempt"] for i in held} == {2}  # replaced, not run twice at once
    assert most_at_once(attempt_spans(db, ids)) <= 2
