"""What the flow-control scenarios (``flood``, ``caps``, ``backlog``) share: queued rows for
given tenants written in bulk, tenants' limits, paced posts as one tenant, and the running
attempts read back from the event log.

Every time is the database's (``clock_timestamp()``, as the store stamps rows and events).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.load import body, percentile, session
from bench.procs import Database
from bench.scenarios.common import Pg
from tether.store.store import Store

STARTS = ("run.started", "run.resumed")
ENDS = ("run.completed", "run.failed", "run.cancelled", "run.waiting")


def insert_queued(
    pg: Pg, counts: Mapping[str, int], input: Any = None, *, returning: bool = True
) -> list[str]:
    """Queued invocations, as if accepted (owner = tenant), in one statement: ``counts[t]`` of
    tenant ``t``, the tenants alternating in ``seq`` order as if they had posted at the same
    time. Returns the ids in ``seq`` order (send their messages in that order, as the gateway
    would have), or nothing unless ``returning``."""
    tenants, numbers = list(counts), [counts[t] for t in counts]
    rows = pg.conn.execute(
        "INSERT INTO tether_invocations (id, owner, tenant, input, request_hash, status, attempt,"
        " cancel_requested, last_event_id, created_at, enqueued_at)"
        " SELECT gen_random_uuid()::text, t.tenant, t.tenant, %s::jsonb, 'prefill', 'queued', 0,"
        " false, 0, extract(epoch from clock_timestamp()), extract(epoch from clock_timestamp())"
        " FROM unnest(%s::text[], %s::int[]) WITH ORDINALITY AS t(tenant, n, k),"
        " generate_series(1, t.n) AS g ORDER BY g, t.k"
        + (" RETURNING id, seq" if returning else ""),
        (json.dumps({} if input is None else input), tenants, numbers),
    )
    pg.queries += 1
    ids = [r[0] for r in sorted(rows.fetchall(), key=lambda r: int(r[1]))] if returning else []
    pg.recount_open()
    return ids


def db_now(pg: Pg) -> float:
    return float(pg.scalar("SELECT extract(epoch from clock_timestamp())::double precision"))


async def set_limits(
    db: Database, limits: Mapping[str, Mapping[str, Any]], global_max_active: int | None
) -> None:
    """Tenants' limits (``Store.tenants``) and the global cap on running attempts."""
    store = Store.postgres(db.sqlalchemy_url, pool_size=1)
    try:
        for tenant, changes in limits.items():
            await store.tenants.set(tenant, changes)
        await store.tenants.set_global_max_active(global_max_active)
    finally:
        await store.close()


@dataclass
class PacedPoster:
    """One tenant posting background invocations at ``rate`` per second, each on its own
    schedule (a slow answer does not delay the next post)."""

    base: str
    tenant: str
    input: Any = None
    statuses: dict[int, int] = field(default_factory=dict)

    async def run(self, rate: float, duration: float) -> int:
        url = f"{self.base}/api/invocations"
        headers = {"Content-Type": "application/json", "X-Forwarded-User": self.tenant}
        count = max(1, round(rate * duration))

        async def post(http: aiohttp.ClientSession, delay: float) -> None:
            await asyncio.sleep(delay)
            async with http.post(url, data=body(self.input, background=True), headers=headers) as r:
                await r.read()
                self.statuses[r.status] = self.statuses.get(r.status, 0) + 1

        async with session(8) as http:
            await asyncio.gather(*(post(http, k / rate) for k in range(count)))
        bad = {s: n for s, n in self.statuses.items() if s != 202}
        if bad:
            raise RuntimeError(f"{self.tenant}: unexpected answers while posting: {bad}")
        return count


def waits(pg: Pg, tenant: str) -> tuple[list[float], list[float]]:
    """Accept → first start (``started_at - created_at``, seconds) of each of ``tenant``'s
    invocations that started; for each one not started yet, how long it has waited so far."""
    rows = pg.conn.execute(
        "SELECT coalesce(started_at, extract(epoch from clock_timestamp())) - created_at,"
        " started_at IS NOT NULL FROM tether_invocations WHERE tenant = %s",
        (tenant,),
    ).fetchall()
    pg.queries += 1
    return [float(r[0]) for r in rows if r[1]], [float(r[0]) for r in rows if not r[1]]


def wait_summary(started: list[float], unstarted: list[float]) -> dict[str, Any]:
    """p50/p99/max in ms. An invocation not started yet counts with the time it has waited so
    far: then the figures are lower bounds."""
    values = started + unstarted
    return {
        "p50_ms": percentile(values, 50) * 1000,
        "p99_ms": percentile(values, 99) * 1000,
        "max_ms": max(values, default=float("nan")) * 1000,
        "count": len(values),
        "not_started": len(unstarted),
    }


def completed_between(pg: Pg, tenant: str, start: float, end: float) -> int:
    return int(
        pg.scalar(
            "SELECT count(*) FROM tether_invocations WHERE tenant = %s"
            " AND finished_at >= %s AND finished_at < %s",
            tenant,
            start,
            end,
        )
    )


def wait_started(pg: Pg, tenant: str, deadline: float) -> bool:
    """Until every invocation of ``tenant`` has started, or ``deadline`` seconds; whether all
    did."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if not pg.scalar(
            "SELECT count(*) FROM tether_invocations WHERE tenant = %s AND started_at IS NULL",
            tenant,
        ):
            return True
        time.sleep(0.2)
    return False


# -- running attempts, read back from the event log ------------------------------------------


@dataclass(frozen=True)
class Attempt:
    tenant: str
    start: float
    end: float  # inf: still running when read


def attempts(pg: Pg) -> list[Attempt]:
    """Every attempt: from its ``run.started``/``run.resumed`` event to its terminal or park
    event, or to the invocation's next start (a replaced attempt writes no end)."""
    rows = pg.conn.execute(
        "SELECT e.invocation_id, i.tenant, e.type, e.created_at"
        " FROM tether_events e JOIN tether_invocations i ON i.id = e.invocation_id"
        " WHERE e.type = ANY(%s) ORDER BY e.invocation_id, e.cursor",
        (list(STARTS + ENDS),),
    ).fetchall()
    pg.queries += 1
    out: list[Attempt] = []
    current: str | None = None
    opened: tuple[str, float] | None = None
    for invocation_id, tenant, kind, at in rows:
        if invocation_id != current:
            if opened is not None:
                out.append(Attempt(opened[0], opened[1], float("inf")))
            current, opened = invocation_id, None
        if kind in STARTS:
            if opened is not None:
                out.append(Attempt(opened[0], opened[1], float(at)))
            opened = (str(tenant), float(at))
        elif opened is not None:
            out.append(Attempt(opened[0], opened[1], float(at)))
            opened = None
    if opened is not None:
        out.append(Attempt(opened[0], opened[1], float("inf")))
    return out


@dataclass
class Overlap:
    """What the sweep found: starts that took a tenant (or everyone) over its cap."""

    violations: int = 0
    global_violations: int = 0
    peak: dict[str, int] = field(default_factory=dict)
    global_peak: int = 0
    first: list[dict[str, Any]] = field(default_factory=list)  # the first few, for the details


def sweep(
    found: Sequence[Attempt], caps: Mapping[str, int | None], global_cap: int | None
) -> Overlap:
    """Running attempts per tenant and in all at every instant, exactly.

    Points are sorted by time, an end before a start at the same instant. That order is right
    here: the store stamps both with ``clock_timestamp()`` inside their transactions, an end
    before its transaction commits and a start after its claim's snapshot was taken; a claim
    that counted a slot as free saw that end committed, so its start is stamped later than the
    end. Equal stamps can only come from the clock's resolution, never from a real overlap.
    """
    points: list[tuple[float, int, str]] = []
    for a in found:
        points.append((a.start, 1, a.tenant))
        points.append((a.end, 0, a.tenant))
    points.sort()
    running: dict[str, int] = defaultdict(int)
    total = 0
    result = Overlap()
    for at, is_start, tenant in points:
        if not is_start:
            running[tenant] -= 1
            total -= 1
            continue
        running[tenant] += 1
        total += 1
        result.peak[tenant] = max(result.peak.get(tenant, 0), running[tenant])
        result.global_peak = max(result.global_peak, total)
        cap = caps.get(tenant)
        if cap is not None and running[tenant] > cap:
            result.violations += 1
            if len(result.first) < 5:
                result.first.append({"tenant": tenant, "at": at, "running": running[tenant]})
        if global_cap is not None and total > global_cap:
            result.global_violations += 1
    return result


def starts_per_second(found: Sequence[Attempt]) -> float:
    """Attempts started per second, first start → last start."""
    starts = sorted(a.start for a in found)
    if len(starts) < 2 or starts[-1] <= starts[0]:
        return float("nan")
    return (len(starts) - 1) / (starts[-1] - starts[0])
