"""Crash detection through the database session, on real processes: a killed worker is replaced
through its session long before stale_after; a frozen one keeps its session and is replaced by
the heartbeat rule, fenced; a PostgreSQL restart and a dropped liveness connection replace
nothing."""

from __future__ import annotations

import os
import signal

import psycopg
import pytest

from tests.client import new_id
from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import (
    TERMINAL,
    Db,
    PrivatePostgres,
    api_for,
    assert_clean_events,
    attempts_started,
    holding,
    log_has,
    owner_of,
    registry,
    settled,
    start_workers,
    until,
    worker_pid,
)
from tests.harness import Cluster, Proc
from tether.store.liveness import LOCK_NAMESPACE

pytestmark = [pytest.mark.faults, pytest.mark.timeout(150)]

HOLD_THEN_RECOVER = {"attempt1": {"emit": 2, "sleep": 300}, "attempt2": {"emit": 2}}
LONG_STALE = {"TETHER_TIMERS__HEARTBEAT_INTERVAL": "2", "TETHER_TIMERS__STALE_AFTER": "60"}
"""Heartbeats that would take a minute to call a worker dead: anything replaced sooner was
found through its session."""
FOUND_DEAD = "its session ended and it stopped beating: dead"


async def test_a_killed_worker_is_replaced_through_its_session_long_before_stale_after(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url, **LONG_STALE)
    workers, db, ids = await two_workers_holding(cluster, fresh_db, 5)
    victim_pid = worker_pid(db.row(ids[0]))
    victim = owner_of(victim_pid, workers)
    [survivor] = [w for w in workers if w is not victim]
    mine = [i for i, r in db.rows(ids).items() if worker_pid(r) == victim_pid]

    os.kill(victim_pid, signal.SIGKILL)
    # well within stale_after (60 s): only the session can have told
    await until(lambda: db.all_match(mine, lambda r: r["status"] == "completed"), 30, "recovery")
    for invocation_id in mine:
        events = db.events(invocation_id)
        assert_clean_events(events)
        assert attempts_started(events) == [1, 2]
        assert db.row(invocation_id)["output"]["recovered"] is True
    dead = [r for r in registry(db).values() if r["state"] == "dead"]
    assert [int(r["name"].rsplit(":", 1)[1]) for r in dead] == [victim_pid]
    assert log_has(survivor, FOUND_DEAD)


async def two_workers_holding(
    cluster: Cluster, fresh_db: str, count: int
) -> tuple[list[Proc], Db, list[str]]:
    """A gateway and two workers, registered and seen, running ``count`` invocations that hold
    (each has emitted 3 events and waits): the workers, the database, the invocations' ids."""
    _, base = cluster.start_gateway()
    workers = start_workers(cluster, 2)
    db = Db(fresh_db)
    await until(lambda: settled(db, 2), 30, "both workers registered and seen")
    ids = [new_id() for _ in range(count)]
    async with api_for(base) as api:
        for invocation_id in ids:
            body = {"id": invocation_id, "input": HOLD_THEN_RECOVER, "background": True}
            assert (await api.post(body))[0] == 202
    await until(lambda: db.all_match(ids, holding(3)), 30, "the runs holding")
    return workers, db, ids


async def test_workers_killed_together_are_marked_dead_by_a_later_one_and_their_runs_recovered(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    """No live scanner saw their locks go: the heartbeat rule replaces their attempts, and the
    next worker marks their rows dead once they are stale_after silent (before, they stayed
    alive until retention and slowed every scan)."""
    cluster = make_cluster(fresh_db, redis_url)  # fast timers: stale after 3 s
    workers, db, ids = await two_workers_holding(cluster, fresh_db, 2)
    killed = set(registry(db))
    for worker in workers:
        worker.signal(signal.SIGKILL)
    [later] = start_workers(cluster, 1)

    def all_dead() -> bool:
        rows = registry(db)
        return all(rows[name]["state"] == "dead" for name in killed)

    await until(all_dead, 30, "the killed workers' rows marked dead")
    await until(lambda: db.all_match(ids, lambda r: r["status"] == "completed"), 30, "recovery")
    for invocation_id in ids:
        events = db.events(invocation_id)
        assert_clean_events(events)
        assert attempts_started(events) == [1, 2]
    assert log_has(later, "no lock held and no beat for 3s: dead")
    assert [r["state"] for n, r in registry(db).items() if n not in killed] == ["alive"]


async def test_a_frozen_worker_keeps_its_session_and_is_replaced_by_heartbeats_fenced(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url)  # fast timers: stale after 3 s
    _, base = cluster.start_gateway()
    workers = start_workers(cluster, 2)
    db = Db(fresh_db)
    await until(lambda: settled(db, 2), 30, "both workers registered and seen")
    invocation_id = new_id()
    spec = {"attempt1": {"emit": 1000, "emit_sleep": 0.2}, "attempt2": {"emit": 3}}
    async with api_for(base) as api:
        assert (await api.post({"id": invocation_id, "input": spec, "background": True}))[0] == 202
        await until(lambda: db.all_match([invocation_id], holding(3)), 30, "attempt 1 writing")
        frozen_pid = worker_pid(db.row(invocation_id))
        frozen = owner_of(frozen_pid, workers)
        [survivor] = [w for w in workers if w is not frozen]
        frozen_name = db.row(invocation_id)["worker"]

        os.kill(frozen_pid, signal.SIGSTOP)
        try:
            await until(
                lambda: db.row(invocation_id)["status"] == "completed", 30, "the replacement"
            )
            row = registry(db)[frozen_name]
            assert row["state"] == "alive" and row["holder"] is not None  # its session lives
            assert not log_has(survivor, FOUND_DEAD)
            assert log_has(survivor, "attempt 1 lost its worker")
        finally:
            os.kill(frozen_pid, signal.SIGCONT)
        stopped = f"invocation {invocation_id}: attempt 1 stopped without finishing (superseded)"
        await until(lambda: log_has(frozen, stopped), 15, "the thawed attempt to stop itself")
        events = db.events(invocation_id)
        assert_clean_events(events)
        assert attempts_started(events) == [1, 2]
        second = next(e["cursor"] for e in events if e["type"] == "run.started" and e["cursor"] > 1)
        assert [e for e in events if e["cursor"] > second and e["data"].get("attempt") == 1] == []


async def test_restarting_postgresql_under_fifty_running_attempts_replaces_none(
    private_pg: PrivatePostgres, redis_url: str, make_cluster: MakeCluster
) -> None:
    # stale_after 10 s: the outage is shorter; liveness_grace (1 s) is far shorter than it
    cluster = make_cluster(private_pg.url, redis_url, TETHER_TIMERS__STALE_AFTER="10")
    _, base = cluster.start_gateway()
    workers = start_workers(cluster, 2)
    db = Db(private_pg.url)
    await until(lambda: settled(db, 2), 30, "both workers registered and seen")
    ids = [new_id() for _ in range(50)]
    spec = {"default": {"emit": 24, "emit_sleep": 0.5}}  # twelve seconds of ticks
    async with api_for(base) as api:
        for invocation_id in ids:
            body = {"id": invocation_id, "input": spec, "background": True}
            assert (await api.post(body))[0] == 202
        await until(lambda: db.all_match(ids, holding(2)), 30, "all fifty running")
        before = {name: r["backend_pid"] for name, r in registry(db).items()}

        private_pg.stop()
        await until(
            lambda: all(log_has(w, "liveness connection lost") for w in workers),
            15,
            "both workers to lose their sessions",
        )
        private_pg.start()

        def retaken() -> bool:
            rows = db.try_query("SELECT 1")
            if rows is None:
                return False
            now = registry(db)
            return (
                all(
                    r["holder"] is not None and r["backend_pid"] != before[r["name"]]
                    for r in now.values()
                )
                and len(now) == 2
            )

        await until(retaken, 30, "both workers to re-take their locks")

        def all_ended() -> bool:
            rows = db.try_query("SELECT status FROM tether_invocations WHERE id = ANY(%s)", [ids])
            return rows is not None and all(r["status"] in TERMINAL for r in rows)

        await until(all_ended, 60, "every run to end")
        for invocation_id, row in db.rows(ids).items():
            assert row["status"] == "completed", row
            events = db.events(invocation_id)
            assert_clean_events(events)
            assert attempts_started(events) == [1], invocation_id
        assert all(r["state"] == "alive" for r in registry(db).values())
        assert not any(log_has(w, FOUND_DEAD) or log_has(w, "lost its worker") for w in workers)


async def test_a_live_worker_whose_liveness_session_is_dropped_is_not_replaced_and_retakes_it(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url, **LONG_STALE)
    _, base = cluster.start_gateway()
    workers = start_workers(cluster, 2)
    db = Db(fresh_db)
    await until(lambda: settled(db, 2), 30, "both workers registered and seen")
    invocation_id = new_id()
    spec = {"default": {"emit": 40, "emit_sleep": 0.25}}
    async with api_for(base) as api:
        assert (await api.post({"id": invocation_id, "input": spec, "background": True}))[0] == 202
        await until(lambda: db.all_match([invocation_id], holding(2)), 30, "the run writing")
        name = db.row(invocation_id)["worker"]
        holder = owner_of(worker_pid(db.row(invocation_id)), workers)

        with psycopg.connect(db.dsn, autocommit=True) as admin:
            [(app_name,)] = admin.execute(
                "SELECT application_name FROM pg_stat_activity WHERE pid = %s",
                [registry(db)[name]["backend_pid"]],
            ).fetchall()
            assert app_name == "tether-liveness"  # the URL's parameters reach libpq
            # Dropped three times; the third time the test holds the old lock itself, as a
            # half-open session of the worker would: the worker takes a fresh lock instead.
            for round_ in range(3):
                row = registry(db)[name]
                admin.execute("SELECT pg_terminate_backend(%s)", [row["backend_pid"]])
                if round_ == 2:
                    admin.execute(
                        "SELECT pg_advisory_lock(%s, %s)", [LOCK_NAMESPACE, row["lock_id"]]
                    )

                def retaken(old: dict[str, object] = row) -> bool:
                    now = registry(db)[name]
                    return bool(
                        now["backend_pid"] != old["backend_pid"]
                        and now["holder"] == now["backend_pid"]
                    )

                await until(retaken, 15, f"the worker to re-take its lock ({round_ + 1})")
            assert registry(db)[name]["lock_id"] != row["lock_id"]

        await until(lambda: db.row(invocation_id)["status"] == "completed", 30, "the run")
        events = db.events(invocation_id)
        assert_clean_events(events)
        assert attempts_started(events) == [1]
        assert registry(db)[name]["state"] == "alive"
        assert log_has(holder, "liveness connection lost")
        assert not any(log_has(w, FOUND_DEAD) or log_has(w, "lost its worker") for w in workers)


async def test_a_worker_that_learns_it_was_declared_dead_hands_its_runs_back_and_lives_on(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    """As after a false death: another worker marked it dead (here, by hand) while it runs."""
    cluster = make_cluster(fresh_db, redis_url, **LONG_STALE)
    _, base = cluster.start_gateway()
    [worker] = start_workers(cluster, 1)
    db = Db(fresh_db)
    await until(lambda: settled(db, 1), 30, "the worker registered")
    invocation_id = new_id()
    async with api_for(base) as api:
        assert (
            await api.post({"id": invocation_id, "input": HOLD_THEN_RECOVER, "background": True})
        )[0] == 202
        await until(lambda: db.all_match([invocation_id], holding(3)), 30, "the run holding")
        name = db.row(invocation_id)["worker"]
        db.query("UPDATE tether_workers SET state = 'dead' WHERE name = %s RETURNING name", [name])

        await until(lambda: db.row(invocation_id)["status"] == "completed", 30, "the replacement")
        events = db.events(invocation_id)
        assert_clean_events(events)
        assert attempts_started(events) == [1, 2]
        assert log_has(worker, "declared dead by another worker; re-registering")
        assert log_has(worker, f"invocation {invocation_id}: attempt 1 stopped without finishing")
        assert registry(db)[name]["state"] == "alive"  # registered again, and serving
        status, answer = await api.post({"id": new_id(), "input": {"default": {"emit": 1}}})
        assert status == 200 and answer["status"] == "completed", answer
