"""The recovery benchmarks' app and the probes they share (:mod:`bench.recovery` kills workers,
:mod:`bench.recovery_faults` freezes them and flushes Redis): submit a run, read the database."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
import uuid
from typing import Any

from tether import AgentApp, InvocationContext
from tether.settings import Timers

APP = "bench.recovery_app:app"
ROUND_LIMIT = 120.0  # seconds any one round may take before the run is abandoned

app = AgentApp(name="recovery-bench")


@app.invoke
async def hold(input: Any, ctx: InvocationContext) -> Any:
    """The first attempt: one event, then hold until the worker is killed (or an hour passes).
    ``{"ticks": N}``: an event every 0.2 s instead, N times; ``{"gate": path}``: wait for that
    file to exist, then return."""
    spec = input if isinstance(input, dict) else {}
    if spec.get("gate"):
        gate = str(spec["gate"])
        for _ in range(60_000):  # twenty minutes at most
            if os.path.exists(gate):  # noqa: ASYNC240 - one stat(), the go signal
                break
            await asyncio.sleep(0.02)
        return {"attempt": ctx.attempt}
    await ctx.emit({"type": "holding"})
    for i in range(int(spec.get("ticks", 0))):
        await ctx.emit({"type": "tick", "i": i, "attempt": ctx.attempt})
        await asyncio.sleep(0.2)
    await asyncio.sleep(3600)
    return {"attempt": ctx.attempt}


@app.recover
async def finish_at_once(input: Any, ctx: InvocationContext) -> Any:
    return {"attempt": ctx.attempt}


def timers_for(env: dict[str, str]) -> Timers:
    values = {
        k.removeprefix("TETHER_TIMERS__").lower(): float(v)
        for k, v in env.items()
        if k.startswith("TETHER_TIMERS__")
    }
    return Timers.model_validate(values)


def settled(dsn: str, count: int) -> bool:
    """``count`` workers alive, each registered two liveness intervals ago or more (every
    scanner has seen every lock since)."""
    rows = query(
        dsn,
        "SELECT count(*) FROM tether_workers WHERE state = 'alive' AND lock_id IS NOT NULL "
        "AND started_at < extract(epoch from clock_timestamp()) - 1.5",
    )
    return int(rows[0][0]) == count


def query(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return list(conn.execute(sql, params).fetchall())


def wait(predicate: Any, what: str, limit: float = ROUND_LIMIT) -> Any:
    from bench.procs import wait_for

    return wait_for(predicate, limit, what)


def submit(base: str, input: Any = None) -> str:
    invocation_id = str(uuid.uuid4())
    body = json.dumps({"id": invocation_id, "input": input or {}, "background": True}).encode()
    request = urllib.request.Request(
        f"{base}/api/invocations",
        data=body,
        headers={"Content-Type": "application/json", "X-Forwarded-Email": "bench@example.com"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 202, response.status
    return invocation_id


def holding_pid(dsn: str, invocation_id: str) -> int | None:
    rows = query(
        dsn,
        "SELECT worker FROM tether_invocations WHERE id = %s AND status = 'active' "
        "AND attempt = 1 AND last_event_id >= 2",
        invocation_id,
    )
    return int(str(rows[0][0]).rsplit(":", 1)[1]) if rows else None
