"""The recovery benchmark's other two faults (``python -m bench.recovery`` runs them).

**freeze**: a worker process holding a run is SIGSTOPped. Its session lives on (a frozen process
announces nothing), so its lock stays held and only the heartbeat rule can replace it: freeze →
replacement's ``run.started``, beside the bound ``stale_after + reaper_interval + 1 s``. Then it
is thawed, and the round checks that the thawed attempt wrote nothing after its replacement began
(fenced) once the thawed process has run for a heartbeat interval.

**flush**: a private ``redis-server``; one worker's four slots are held by gated runs while N
no-op invocations wait as Redis messages; then ``FLUSHALL``, and the gate opens. Figure: flush →
each invocation's ``run.started``, p50 and max over every invocation. Same-run baseline: one
round with the broker check off (``timers.broker_check = 0``), where only ``requeue_after``
brings the work back.

Times are on the database clock, read right after each signal or flush.
"""

from __future__ import annotations

import os
import signal
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.recovery_app import APP, holding_pid, query, settled, submit, timers_for, wait

SLOTS = 4
NOW = "SELECT extract(epoch from clock_timestamp())::float8"


def _now(dsn: str) -> float:
    return float(query(dsn, NOW)[0][0])


def _started(dsn: str, invocation_id: str, attempt: int) -> tuple[int, float] | None:
    rows = query(
        dsn,
        "SELECT cursor, created_at FROM tether_events WHERE invocation_id = %s "
        "AND type = 'run.started' AND (data->>'attempt')::int = %s",
        invocation_id,
        attempt,
    )
    return (int(rows[0][0]), float(rows[0][1])) if rows else None


def one_freeze(launch: Any, base: str, dsn: str, heartbeat_interval: float) -> dict[str, Any]:
    wait(lambda: settled(dsn, 2), "both workers registered")
    invocation_id = submit(base, {"ticks": 100_000})
    pid = wait(lambda: holding_pid(dsn, invocation_id), "the run to start")
    [(name,)] = query(dsn, "SELECT worker FROM tether_invocations WHERE id = %s", invocation_id)
    os.kill(pid, signal.SIGSTOP)
    frozen_at = _now(dsn)
    try:
        cursor, started_at = wait(lambda: _started(dsn, invocation_id, 2), "the replacement")
        [(state, holder)] = query(
            dsn,
            "SELECT w.state, (SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' "
            "AND l.granted AND l.objsubid = 2 AND l.classid = 2122186754 "
            "AND l.objid::bigint = w.lock_id) FROM tether_workers w WHERE w.name = %s",
            name,
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    thawed_at = _now(dsn)
    ran_again = "SELECT 1 FROM tether_workers WHERE name = %s AND beat_at > %s::float8 + %s::float8"
    wait(lambda: query(dsn, ran_again, name, thawed_at, heartbeat_interval), "the thaw")
    late = query(
        dsn,
        "SELECT count(*) FROM tether_events WHERE invocation_id = %s AND cursor > %s "
        "AND data->>'attempt' = '1'",
        invocation_id,
        cursor,
    )[0][0]
    return {
        "to_started": started_at - frozen_at,
        "lock_kept": state == "alive" and holder is not None,
        "fenced": int(late) == 0,
    }


def run_freezes(rounds: int) -> dict[str, Any]:
    from bench.procs import launcher, private_database

    timers = timers_for({})
    bound = timers.stale_after + timers.reaper_interval + 1.0
    samples = []
    with private_database() as db, launcher(db) as launch:
        _, base = launch.gateway(APP)
        launch.worker(APP)
        launch.worker(APP)
        for i in range(rounds):
            samples.append(one_freeze(launch, base, db.url, timers.heartbeat_interval))
            print(f"  freeze {i + 1}/{rounds}: run.started +{samples[-1]['to_started']:.2f}s")
    started = [s["to_started"] for s in samples]
    return {
        "scenario": "freeze",
        "config": "default timers",
        "rounds": rounds,
        "to_started_s": {"p50": statistics.median(started), "max": max(started)},
        "bound_s": bound,
        "within_bound": sum(s <= bound for s in started),
        "lock_kept": sum(s["lock_kept"] for s in samples),
        "fenced": sum(s["fenced"] for s in samples),
        "samples": samples,
    }


def one_flush(launch: Any, base: str, dsn: str, redis: Any, queued: int) -> list[float]:
    import redis as redis_client

    workdir = Path(tempfile.mkdtemp(prefix="tether-bench-gate-"))
    gate = workdir / "go"
    blockers = [submit(base, {"gate": str(gate)}) for _ in range(SLOTS)]
    active = "SELECT count(*) FROM tether_invocations WHERE id = ANY(%s) AND status = 'active'"
    wait(lambda: query(dsn, active, blockers)[0][0] == SLOTS, "the slots to fill")
    ids = [submit(base, {"gate": str(workdir)}) for _ in range(queued)]  # returns at once
    client = redis_client.Redis.from_url(redis.url)
    try:
        waiting = f"dramatiq:{launch.queue}.msgs"
        wait(lambda: client.hlen(waiting) >= queued, "every message in Redis")
        client.flushall()
    finally:
        client.close()
    flushed_at = _now(dsn)
    gate.touch()
    done = "SELECT count(*) FROM tether_invocations WHERE id = ANY(%s) AND status = 'completed'"
    wait(lambda: query(dsn, done, ids)[0][0] == queued, "every queued run", limit=240)
    rows = query(
        dsn,
        "SELECT created_at FROM tether_events WHERE invocation_id = ANY(%s) "
        "AND type = 'run.started'",
        ids,
    )
    assert len(rows) == queued, f"{len(rows)} starts for {queued} invocations"
    return [float(r[0]) - flushed_at for r in rows]


def run_flushes(rounds: int, queued: int) -> list[dict[str, Any]]:
    from bench.procs import launcher, private_database
    from tests.faults.harness_ext import PrivateRedis

    results = []
    for config, env, n in (
        ("broker_check 1 s", {}, rounds),
        ("requeue_after only", {"TETHER_TIMERS__BROKER_CHECK": "0"}, 1),
    ):
        server = PrivateRedis(Path(tempfile.mkdtemp(prefix="tether-bench-redis-")))
        server.start()
        overrides = {
            "TETHER_REDIS_URL": server.url,
            "TETHER_WORKER__CONCURRENCY": str(SLOTS),
            **env,
        }
        per_round = []
        try:
            with private_database() as db, launcher(db, env_overrides=overrides) as launch:
                _, base = launch.gateway(APP)
                launch.worker(APP)
                for i in range(n):
                    per_round.append(one_flush(launch, base, db.url, server, queued))
                    print(
                        f"  flush ({config}) {i + 1}/{n}: all {queued} started "
                        f"+{max(per_round[-1]):.2f}s"
                    )
        finally:
            server.kill()
        every = [t for r in per_round for t in r]
        results.append(
            {
                "scenario": "flush",
                "config": config,
                "rounds": n,
                "queued": queued,
                "to_started_s": {"p50": statistics.median(every), "max": max(every)},
                "round_max_s": [max(r) for r in per_round],
            }
        )
    return results


def print_faults(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'fault':<7} {'config':<20} {'rounds':>6}  {'→ run.started p50':>18} {'max':>7}  notes"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        s = r["to_started_s"]
        if r["scenario"] == "freeze":
            notes = (
                f"bound {r['bound_s']:.1f}s: {r['within_bound']}/{r['rounds']} within; "
                f"lock kept while frozen {r['lock_kept']}/{r['rounds']}; "
                f"fenced {r['fenced']}/{r['rounds']}"
            )
        else:
            notes = f"{r['queued']} queued per flush, every one started"
        print(
            f"{r['scenario']:<7} {r['config']:<20} {r['rounds']:>6}  {s['p50']:>17.2f}s "
            f"{s['max']:>6.2f}s  {notes}"
        )
    print("freeze: SIGSTOP → replacement; flush: FLUSHALL → each queued invocation's first start")
