"""A large event log in PostgreSQL: appends and ``after=N`` replays on an empty table against the
same with ``eventlog_invocations x eventlog_events_each`` old events bulk-inserted, then
retention deleting them while an invocation keeps appending.

1 gateway + 1 worker process (``bench.apps:both``). The old invocations are finished eight days
ago, their events interleaved across invocations as concurrent runs write them (cursor-major),
then ``VACUUM ANALYZE`` (what autovacuum would have done). The worker runs with retention off
(``timers.retention`` of ~30 years) until the retention phase, which restarts it with the default
7 days: the reaper then deletes the old invocations in its batches while a live invocation emits
a tick every ``retention_tick`` s to a live SSE client.

Figures: events/s stored by one invocation emitting ``eventlog_append`` events as fast as it can
(median of rounds); request → first event and → last event of ``GET …/events?after=N``
replaying ``eventlog_replay`` events (p50 of rounds), for a new invocation and for an old one;
during retention, emit → receive p99 and the longest gap between two ticks' emits (an append
that stalls delays every later tick), against the same before retention; how long retention
took. ``EXPLAIN (ANALYZE, BUFFERS)`` of the replay query and table / index sizes go to details.
"""

from __future__ import annotations

import asyncio
import hashlib
import statistics
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import psycopg

from bench.load import Received, owner_headers, percentile, read_sse
from bench.peer_load import post_body
from bench.procs import Launcher, launcher, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Sizes
from tether.store.maintenance import EXPIRED_EVENTS
from tether.timer_settings import MAX_RETENTION

APP = "bench.apps:both"
OWNER = 0
OWNER_NAME = "bench-0"
NO_RETENTION = {"TETHER_TIMERS__RETENTION": str(MAX_RETENTION)}  # the longest: 100 years
OLD = 8 * 86400  # the bulk-inserted invocations finished this many seconds ago
CHUNK = 1000  # old invocations per INSERT statement
STALL = 1.0  # a gap between ticks (s) past which the run keeps its process logs
REPLAY_SQL = (
    "SELECT e.cursor, e.type, e.data, CASE WHEN e.type = 'run.completed' THEN"
    " (SELECT i.output FROM tether_invocations i WHERE i.id = e.invocation_id) END"
    " FROM tether_events e WHERE e.invocation_id = %s AND e.cursor > %s"
    " ORDER BY e.cursor LIMIT 1000"
)  # the statement Store.events_after sends (a completed run's output from its row)


@dataclass
class Figures:
    append_per_s: float
    replay_first_ms: float
    replay_all_ms: float
    old_first_ms: float | None = None
    old_all_ms: float | None = None
    plan: str = ""
    rounds: dict[str, list[float]] = field(default_factory=dict)


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300))


async def post(http: aiohttp.ClientSession, base: str, input: object) -> str:
    invocation_id = str(uuid.uuid4())
    data = post_body(invocation_id, input, background=True)
    async with http.post(f"{base}/api/invocations", data=data, headers=owner_headers(OWNER)) as r:
        if r.status != 202:
            raise RuntimeError(f"POST answered {r.status}")
    return invocation_id


async def finished(pg: Pg, invocation_id: str, deadline: float) -> None:
    end = time.monotonic() + deadline
    while pg.scalar("SELECT status FROM tether_invocations WHERE id = %s", invocation_id) not in (
        "completed",
        "failed",
    ):
        if time.monotonic() > end:
            raise TimeoutError(f"invocation {invocation_id} did not finish")
        await asyncio.sleep(0.05)


async def append_rate(http: aiohttp.ClientSession, base: str, pg: Pg, events: int) -> float:
    invocation_id = await post(http, base, {"events": events})
    await finished(pg, invocation_id, 300)
    span = pg.scalar(
        "SELECT finished_at - started_at FROM tether_invocations WHERE id = %s", invocation_id
    )
    return events / float(span)


async def replay(
    http: aiohttp.ClientSession, base: str, invocation_id: str, after: int
) -> tuple[float, float]:
    url = f"{base}/api/invocations/{invocation_id}/events?after={after}"
    started = time.perf_counter()
    async with http.get(url, headers=owner_headers(OWNER)) as r:
        if r.status != 200:
            raise RuntimeError(f"replay answered {r.status}")
        await r.content.readline()
        first = time.perf_counter() - started
        await r.read()
    return first * 1000, (time.perf_counter() - started) * 1000


async def measure(base: str, pg: Pg, sizes: Sizes, old: str | None) -> Figures:
    rounds: dict[str, list[float]] = {"append": [], "first": [], "all": []}
    async with session() as http:
        await append_rate(http, base, pg, sizes.eventlog_append // 10)  # warm-up, not counted
        for _ in range(sizes.eventlog_rounds):
            rounds["append"].append(await append_rate(http, base, pg, sizes.eventlog_append))
        target = await post(http, base, {"events": 2 * sizes.eventlog_replay})
        await finished(pg, target, 300)
        for _ in range(5 * sizes.eventlog_rounds):
            first, whole = await replay(http, base, target, sizes.eventlog_replay)
            rounds["first"].append(first)
            rounds["all"].append(whole)
        figures = Figures(
            append_per_s=statistics.median(rounds["append"]),
            replay_first_ms=statistics.median(rounds["first"]),
            replay_all_ms=statistics.median(rounds["all"]),
            rounds=rounds,
        )
        if old is not None:
            half = sizes.eventlog_events_each // 2
            got = [await replay(http, base, old, half) for _ in range(5 * sizes.eventlog_rounds)]
            figures.old_first_ms = statistics.median(g[0] for g in got)
            figures.old_all_ms = statistics.median(g[1] for g in got)
            rows = pg.conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + REPLAY_SQL, (old, half))
            figures.plan = "\n".join(r[0] for r in rows.fetchall())
    return figures


def bulk_insert(pg: Pg, invocations: int, each: int) -> dict[str, Any]:
    """Old finished invocations and their events, cursor-major within each chunk."""
    started = time.perf_counter()
    for first in range(0, invocations, CHUNK):
        last = min(first + CHUNK, invocations)
        pg.conn.execute(
            "INSERT INTO tether_invocations (id, owner, tenant, input, request_hash, status,"
            " attempt, cancel_requested, last_event_id, created_at, enqueued_at, started_at,"
            " finished_at)"
            " SELECT md5('old-' || g)::uuid::text, %s, %s, '{}'::jsonb, 'bulk', 'completed', 1,"
            " false, %s, t, t, t, t"
            " FROM generate_series(%s::int, %s::int) AS g,"
            " (SELECT extract(epoch from now()) - %s AS t) AS o",
            (OWNER_NAME, OWNER_NAME, each, first, last - 1, OLD),
        )
        pg.conn.execute(
            "INSERT INTO tether_events (invocation_id, cursor, type, data, created_at)"
            " SELECT md5('old-' || g)::uuid::text, c, 'tick',"
            " jsonb_build_object('i', c, 't', 0), o.t"
            " FROM generate_series(1, %s) AS c, generate_series(%s::int, %s::int) AS g,"
            " (SELECT extract(epoch from now()) - %s AS t) AS o ORDER BY c, g",
            (each, first, last - 1, OLD),
        )
    inserted = time.perf_counter() - started
    pg.conn.execute("VACUUM ANALYZE tether_events")
    pg.conn.execute("VACUUM ANALYZE tether_invocations")
    return {
        "pkey_levels": pkey_levels(pg),
        "retention_plans": retention_plans(pg, invocations, each),
        "insert_s": inserted,
        "events": invocations * each,
        "events_table": pg.scalar("SELECT pg_size_pretty(pg_table_size('tether_events'))"),
        "events_pkey": pg.scalar("SELECT pg_size_pretty(pg_relation_size('tether_events_pkey'))"),
        "invocations_total": pg.scalar(
            "SELECT pg_size_pretty(pg_total_relation_size('tether_invocations'))"
        ),
    }


def pkey_levels(pg: Pg) -> int | None:
    """B-tree levels above the leaves of the events' primary key (pageinspect), if available."""
    try:
        pg.conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        return int(pg.scalar("SELECT level FROM bt_metap('tether_events_pkey')"))
    except psycopg.Error:
        return None


def retention_plans(pg: Pg, invocations: int, each: int) -> str:
    """The plans of one retention batch as ``Maintenance.delete_expired`` runs it: read the
    oldest expired ids, lock as many as fit in ``EXPIRED_EVENTS`` (``SKIP LOCKED``), delete
    their events; without running the delete."""
    fit = min(max(1, EXPIRED_EVENTS // each), invocations)
    ids = [old_id(k) for k in range(fit)]
    oldest = (
        "SELECT id, last_event_id FROM tether_invocations WHERE status IN"
        " ('completed', 'failed', 'cancelled') AND finished_at <"
        " (SELECT extract(epoch from clock_timestamp())::double precision - %s)"
        " ORDER BY finished_at LIMIT %s"
    )
    pick = pg.conn.execute(f"EXPLAIN {oldest}", (7 * 86400, 500)).fetchall()
    lock = pg.conn.execute(f"EXPLAIN {oldest} FOR UPDATE SKIP LOCKED", (7 * 86400, fit)).fetchall()
    delete = pg.conn.execute(
        "EXPLAIN DELETE FROM tether_events WHERE invocation_id = ANY(%s)", (ids,)
    ).fetchall()
    return "\n".join(clip(r[0]) for r in [*pick, *lock, *delete])


def clip(line: str, width: int = 160) -> str:
    """A plan line without its 500 literal ids."""
    return line if len(line) <= width else line[: width - 5] + " ...)"


def old_id(k: int) -> str:
    """The id ``bulk_insert`` gave its ``k``-th invocation."""
    return str(uuid.UUID(hashlib.md5(f"old-{k}".encode()).hexdigest()))


@dataclass
class Ticks:
    latencies: list[float]
    gaps: list[float]


async def ticking(base: str, count: int, interval: float) -> Ticks:
    """One invocation emitting ``count`` ticks ``interval`` s apart, read live over SSE."""
    latencies: list[float] = []
    emitted: list[float] = []

    def on_event(event: Received) -> None:
        if event.type == "tick":
            latencies.append(event.at - float(event.data["t"]))
            emitted.append(float(event.data["t"]))

    async with session() as http:
        invocation_id = await post(http, base, {"events": count, "interval": interval})
        url = f"{base}/api/invocations/{invocation_id}/events"
        async with http.get(url, headers=owner_headers(OWNER)) as r:
            await read_sse(r, on_event)
    gaps = [b - a for a, b in zip(emitted, emitted[1:], strict=False)]
    return Ticks(latencies, gaps)


async def retention(launch: Launcher, base: str, pg: Pg, sizes: Sizes) -> dict[str, Any]:
    """Restart the worker with the default retention; tick through the deletes."""

    def count() -> int:
        return int(pg.scalar("SELECT count(*) FROM tether_invocations WHERE request_hash = 'bulk'"))

    before = await ticking(base, sizes.retention_ticks // 4, sizes.retention_tick)
    for proc in [p for p in launch.procs if p.name == "worker"]:
        launch.stop(proc)
    launch.worker(APP, 1, 4)  # default retention: 7 days
    started = time.perf_counter()
    progress: list[tuple[float, int]] = []
    ticks = asyncio.create_task(ticking(base, sizes.retention_ticks, sizes.retention_tick))
    while count() and time.perf_counter() - started < sizes.deadline:
        progress.append((round(time.perf_counter() - started, 1), count()))
        await asyncio.sleep(1.0)
    deleted_in = time.perf_counter() - started if not count() else float("nan")
    during = await ticks
    if during.gaps and max(during.gaps) > STALL:
        launch.keep_logs = f"a {max(during.gaps):.1f} s gap between ticks during retention"
    return {"before": before, "during": during, "deleted_s": deleted_in, "progress": progress}


def rows_for(empty: Figures, big: Figures, info: dict[str, Any], ret: dict[str, Any]) -> list[Row]:
    size = f"{info['events']:,} old events"
    details = {**info, "plan": big.plan, "empty_rounds": empty.rounds, "big_rounds": big.rounds}
    before, during = ret["before"], ret["during"]

    def row(figure: str, value: float, base: float, unit: str, label: str) -> Row:
        better: Literal["higher", "lower"] = "higher" if unit == "/s" else "lower"
        return Row("eventlog", figure, value, unit, better, base, label, details=details)

    return [
        row(f"append events/s, {size}", big.append_per_s, empty.append_per_s, "/s", "empty"),
        row(
            f"replay first event ms, {size}",
            big.replay_first_ms,
            empty.replay_first_ms,
            "ms",
            "empty",
        ),
        row(f"replay all ms, {size}", big.replay_all_ms, empty.replay_all_ms, "ms", "empty"),
        row(
            f"replay first event ms, an OLD invocation, {size}",
            big.old_first_ms or 0.0,
            empty.replay_first_ms,
            "ms",
            "new one, empty table",
        ),
        row(
            f"replay all ms, an OLD invocation, {size}",
            big.old_all_ms or 0.0,
            empty.replay_all_ms,
            "ms",
            "new one, empty table",
        ),
        row(
            f"emit->receive p99 ms during retention of {size}",
            percentile(during.latencies, 99) * 1000,
            percentile(before.latencies, 99) * 1000,
            "ms",
            "same, before retention",
        ),
        row(
            f"longest gap between ticks ms during retention (interval "
            f"{1000 * (during.gaps and min(during.gaps) or 0):.0f}+ ms)",
            max(during.gaps) * 1000,
            max(before.gaps) * 1000,
            "ms",
            "same, before retention",
        ),
        Row(
            "eventlog",
            f"s for retention to delete {size}",
            ret["deleted_s"],
            "s",
            "lower",
            details={"progress": ret["progress"]},
        ),
    ]


async def run(sizes: Sizes) -> list[Row]:
    with private_database() as db, launcher(db) as launch:
        pg = Pg(db)
        try:
            launch.worker(APP, 1, 4, extra=NO_RETENTION)
            _, base = launch.gateway(APP, 1)
            empty = await measure(base, pg, sizes, None)
            info = bulk_insert(pg, sizes.eventlog_invocations, sizes.eventlog_events_each)
            old = old_id(sizes.eventlog_invocations // 2)
            big = await measure(base, pg, sizes, old)
            ret = await retention(launch, base, pg, sizes)
        finally:
            pg.close()
    return rows_for(empty, big, info, ret)
