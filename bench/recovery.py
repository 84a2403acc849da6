"""How long a run waits after its worker dies, and after Redis loses its messages.

**kill**: each round submits one invocation whose first attempt holds still, SIGKILLs the worker
process that runs it (found through ``tether_invocations.worker``) while a second worker lives,
and reads the replacement's ``run.started`` and ``run.completed`` times from
``tether_events.created_at``. Every time is on the database clock, the kill's included (read
right after the signal), so no two clocks are compared. The killed worker is replaced before the
next round, and a round starts once every worker has been registered for a while (a lock gone
before any scanner saw it is left to the heartbeat rule). Timer sets: ``default`` (crash
detection through the session), ``heartbeats`` (the same timers with it turned off: the
same-run baseline, how Tether recovered before), ``fast``.

**freeze** and **flush**: see :mod:`bench.recovery_faults`. The app they all run is
:mod:`bench.recovery_app`.

Run: ``python -m bench.recovery`` (``--kills N``, ``--timers ...``, ``--freezes N``,
``--flushes N``, ``--queued N``). It starts its own gateway and workers on a private database and
Dramatiq queue (and, for ``flush``, a private ``redis-server``), prints a table, and writes
``bench/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.recovery_app import APP, holding_pid, query, settled, submit, timers_for, wait

RESULTS = Path(__file__).resolve().parent / "results"
TIMERS: dict[str, dict[str, str]] = {
    "default": {},
    "heartbeats": {"TETHER_WORKER__SESSION_LIVENESS": "false"},
    "fast": {
        "TETHER_TIMERS__HEARTBEAT_INTERVAL": "0.5",
        "TETHER_TIMERS__STALE_AFTER": "3",
        "TETHER_TIMERS__REAPER_INTERVAL": "0.5",
    },
}


@dataclass
class Kill:
    """One SIGKILL, in seconds on the database clock."""

    heartbeat_age: float  # how old the last heartbeat was when the worker died
    to_started: float  # kill → the replacement attempt's run.started
    to_completed: float  # kill → run.completed


def session_liveness(env: dict[str, str]) -> bool:
    return env.get("TETHER_WORKER__SESSION_LIVENESS", "true") != "false"


def bound_for(env: dict[str, str]) -> tuple[float, str]:
    """The worst case of a timer set, kill → replacement's run.started, and how it is made."""
    timers = timers_for(env)
    if session_liveness(env):
        bound = timers.liveness_grace + 2 * timers.liveness_interval + 1.0
        return bound, "liveness_grace + 2 × liveness_interval + 1 s"
    return timers.stale_after + timers.reaper_interval + 1.0, "stale_after + reaper_interval + 1 s"


def one_kill(launch: Any, base: str, dsn: str, liveness: bool) -> Kill:
    """Submit, wait for the run to hold, SIGKILL its worker, measure, replace the worker."""
    if liveness:
        wait(lambda: settled(dsn, 2), "both workers registered")
    invocation_id = submit(base)
    pid = wait(lambda: holding_pid(dsn, invocation_id), "the run to start")
    group = os.getpgid(pid)
    [victim] = [p for p in launch.procs if p.name == "worker" and p.pid == group]
    os.kill(pid, signal.SIGKILL)
    [(killed_at, beat_at)] = query(
        dsn,
        "SELECT extract(epoch from clock_timestamp())::float8, heartbeat_at "
        "FROM tether_invocations WHERE id = %s",
        invocation_id,
    )
    done = "SELECT status FROM tether_invocations WHERE id = %s"
    wait(lambda: query(dsn, done, invocation_id)[0][0] == "completed", "the replacement")
    times = dict(
        query(
            dsn,
            "SELECT type, created_at FROM tether_events WHERE invocation_id = %s "
            "AND (type = 'run.completed' OR (type = 'run.started' AND data->>'attempt' = '2'))",
            invocation_id,
        )
    )
    launch.stop(victim)
    launch.worker(APP)
    return Kill(
        heartbeat_age=killed_at - beat_at,
        to_started=times["run.started"] - killed_at,
        to_completed=times["run.completed"] - killed_at,
    )


def run_config(name: str, kills: int) -> dict[str, Any]:
    from bench.procs import launcher, private_database

    env = TIMERS[name]
    timers = timers_for(env)
    bound, bound_rule = bound_for(env)
    samples: list[Kill] = []
    with private_database() as db, launcher(db, env_overrides=env) as launch:
        _, base = launch.gateway(APP)
        launch.worker(APP)
        launch.worker(APP)
        for i in range(kills):
            samples.append(one_kill(launch, base, db.url, session_liveness(env)))
            last = samples[-1]
            print(
                f"  {name} kill {i + 1:2d}/{kills}: run.started +{last.to_started:.2f}s, "
                f"completed +{last.to_completed:.2f}s",
                flush=True,
            )
    started = [k.to_started for k in samples]
    completed = [k.to_completed for k in samples]
    return {
        "timers": name,
        "scenario": "kill",
        "settings": {
            **timers.model_dump(
                include={
                    "heartbeat_interval",
                    "stale_after",
                    "reaper_interval",
                    "liveness_interval",
                    "liveness_grace",
                }
            ),
            "session_liveness": session_liveness(env),
        },
        "kills": kills,
        "bound_s": bound,
        "bound_rule": bound_rule,
        "to_started_s": {"p50": statistics.median(started), "max": max(started)},
        "to_completed_s": {"p50": statistics.median(completed), "max": max(completed)},
        "within_bound": sum(s <= bound for s in started),
        "samples": [asdict(k) for k in samples],
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'timers':<10} {'kills':>5}  {'kill→run.started p50':>21} {'max':>7}  "
        f"{'kill→completed p50':>19} {'max':>7}  {'bound':>6}  within"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        s, c = r["to_started_s"], r["to_completed_s"]
        print(
            f"{r['timers']:<10} {r['kills']:>5}  {s['p50']:>20.2f}s {s['max']:>6.2f}s  "
            f"{c['p50']:>18.2f}s {c['max']:>6.2f}s  {r['bound_s']:>5.1f}s  "
            f"{r['within_bound']}/{r['kills']}"
        )
    for rule in sorted({r["bound_rule"] for r in rows}):
        names = ", ".join(r["timers"] for r in rows if r["bound_rule"] == rule)
        print(f"bound ({names}) = {rule}, kill → the replacement's run.started")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery", description=__doc__)
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs per timer set (default 20)")
    parser.add_argument("--timers", nargs="*", choices=list(TIMERS), default=list(TIMERS))
    parser.add_argument(
        "--freezes", type=int, default=5, help="SIGSTOP rounds, default timers (default 5; 0: none)"
    )
    parser.add_argument(
        "--flushes", type=int, default=3, help="Redis FLUSHALL rounds (default 3; 0: none)"
    )
    parser.add_argument(
        "--queued", type=int, default=200, help="invocations queued at each flush (default 200)"
    )
    parser.add_argument(
        "--out", help="JSON file to write (default bench/results/recovery-<time>.json)"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.kills <= 100:
        parser.error("--kills must be between 1 and 100")
    from bench.recovery_faults import print_faults, run_flushes, run_freezes

    rows = [run_config(name, args.kills) for name in args.timers]
    faults = []
    if args.freezes:
        faults.append(run_freezes(args.freezes))
    if args.flushes:
        faults.extend(run_flushes(args.flushes, args.queued))
    print()
    if rows:
        print_table(rows)
    if faults:
        print()
        print_faults(faults)
    rows += faults
    out = (
        Path(args.out) if args.out else RESULTS / f"recovery-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    out.write_text(json.dumps({"benchmark": "recovery", **meta, "results": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
