"""The fault tests' app: the contract app's behaviours, chosen per attempt.

Input ``{"attempt1": {...}, "attempt2": {...}, "default": {...}}``: attempt N runs the contract
app's ``behave`` with ``attemptN`` (else ``default``), so a first attempt can hold still until it is
killed while its replacement finishes at once. One more key, ``block_mid_write`` (seconds), blocks
the event loop at the worst moment, while a write of this process is mid-transaction, once the
file named by ``after_file`` exists; ``after_file`` alone waits for that file, then behaves.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from tests.apps.contract import behave
from tether import AgentApp, InvocationContext

app = AgentApp(name="faults")

IN_FLIGHT = """
SELECT 1 FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND state = 'idle in transaction'
  AND (query LIKE 'UPDATE tether_invocations%'
       OR query LIKE 'WITH event_rows AS%'
       OR (query LIKE 'SELECT tether_invocations.id%' AND query LIKE '%FOR UPDATE%'))
"""
"""A session of this process mid-transaction on an invocation row: it locked the row (the group
commit's ``SELECT … FOR UPDATE SKIP LOCKED``), updated it, or is appending its events after the
update, and waits for this loop to go on."""


async def block_mid_write(seconds: float, ctx: InvocationContext) -> dict[str, Any]:
    """Emit events and yield until a session of this database sits idle in a transaction that
    updated an invocation row (holding its row lock, waiting for this very loop), then block the
    loop with ``time.sleep``. Says whether it caught that moment, and when it blocked."""
    import psycopg

    dsn = os.environ["TETHER_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as probe:
        for i in range(100):
            await ctx.emit({"type": "tick", "i": i, "attempt": ctx.attempt})
            for _ in range(20):
                await asyncio.sleep(0)
                if probe.execute(IN_FLIGHT).fetchone() is not None:
                    blocked_at = time.time()
                    time.sleep(seconds)  # noqa: ASYNC251 - blocking the loop is the point
                    return {"caught": True, "blocked_at": blocked_at, "attempt": ctx.attempt}
    return {"caught": False, "attempt": ctx.attempt}


async def until_exists(path: str, within: float = 60.0) -> None:
    """Wait (without blocking the loop) for the test to create ``path``: its go signal."""
    for _ in range(int(within / 0.05)):
        if os.path.exists(path):  # noqa: ASYNC240 - one stat(), the test's go signal
            return
        await asyncio.sleep(0.05)


async def by_attempt(input: Any, ctx: InvocationContext) -> Any:
    spec = input if isinstance(input, dict) else {}
    chosen = spec.get(f"attempt{ctx.attempt}", spec.get("default", {}))
    if isinstance(chosen, dict) and "after_file" in chosen:
        await until_exists(str(chosen["after_file"]))
        if "block_mid_write" in chosen:
            return await block_mid_write(float(chosen["block_mid_write"]), ctx)
    return await behave(chosen, ctx)


app.invoke(by_attempt)
app.recover(by_attempt)
