"""How a client learns that 2,000 background no-ops are done, and what that costs: the same
burst on 1 gateway + 1 worker process, timed four ways, each beside the database's own answer
for the same burst (first ``created_at`` → last ``finished_at``).

- ``sweep``: post all (c=32), then read every pending status, 32 reads at a time, until none is
  pending (the peer scenario's client);
- ``poll-100ms`` / ``poll-0ms``: 32 client loops, each posting one invocation and reading its
  status every 100 ms (or with no pause) until it is terminal, then the next: a closed loop, as
  a simple "submit and wait" client is written;
- ``db-count``: post all, then count completed rows in PostgreSQL every 50 ms (how ``e2e`` and
  ``drain`` know; no client can do this).

Per way, the CPU seconds of the client (this process), the gateway, the worker and the
database backends over the burst say where the two cores went.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench.load import owner_headers
from bench.peer_load import INVOCATIONS, TERMINAL, burst, post_body
from bench.procs import Database, Proc, cpu_seconds, launcher, private_database
from bench.raw_http import Requests, request_client
from bench.report import Row
from bench.scenarios.common import Pg, Sizes

APP = "bench.apps:noop"


@dataclass
class Way:
    seconds: float  # first POST -> the client knows all are terminal
    server_seconds: float  # first created_at -> last finished_at (database clock)
    reads: int
    cpu: dict[str, float]


async def closed_loop(base: str, count: int, concurrency: int, pause: float, end: float) -> int:
    """``concurrency`` loops of: POST one, read its status every ``pause`` s until terminal."""
    todo = iter(range(count))
    reads = 0

    async def loop(http: Requests) -> None:
        nonlocal reads
        for i in todo:
            invocation_id = str(uuid.uuid4())
            headers = owner_headers(i)
            data = post_body(invocation_id, background=True)
            answer = await http.request("POST", INVOCATIONS, data, headers)
            if answer.status != 202:
                raise RuntimeError(f"POST answered {answer.status}")
            while time.perf_counter() < end:
                if pause:
                    await asyncio.sleep(pause)
                answer = await http.request("GET", f"{INVOCATIONS}/{invocation_id}", b"", headers)
                reads += 1
                if json.loads(answer.body)["status"] in TERMINAL:
                    break

    async with request_client(base, concurrency) as http:
        await asyncio.gather(*(loop(http) for _ in range(concurrency)))
    return reads


async def post_then_count(base: str, pg: Pg, count: int, concurrency: int, end: float) -> int:
    ids = [str(uuid.uuid4()) for _ in range(count)]
    todo = iter(enumerate(ids))

    async def loop(http: Requests) -> None:
        for i, invocation_id in todo:
            data = post_body(invocation_id, background=True)
            answer = await http.request("POST", INVOCATIONS, data, owner_headers(i))
            if answer.status != 202:
                raise RuntimeError(f"POST answered {answer.status}")

    async with request_client(base, concurrency) as http:
        await asyncio.gather(*(loop(http) for _ in range(concurrency)))
    while pg.count("completed") < count:
        if time.perf_counter() > end:
            raise TimeoutError("db-count: invocations not completed in time")
        await asyncio.sleep(0.05)
    return 0


def cpu_of(procs: dict[str, Proc], db: Database, probe: int) -> dict[str, float]:
    out = {name: proc.cpu_seconds() for name, proc in procs.items()}
    out["postgres"] = sum(cpu_seconds(pid) for pid in db.backend_pids() - {probe})
    out["client"] = time.process_time()
    return out


async def timed(
    how: Callable[[], Awaitable[int]], pg: Pg, db: Database, procs: dict[str, Proc], n: int
) -> Way:
    pg.conn.execute("TRUNCATE tether_invocations, tether_events")
    probe = pg.conn.info.backend_pid
    before = cpu_of(procs, db, probe)
    started = time.perf_counter()
    reads = await how()
    seconds = time.perf_counter() - started
    after = cpu_of(procs, db, probe)
    if pg.count("completed") != n:
        raise RuntimeError(f"{pg.count('completed')} of {n} completed")
    server = pg.span("created_at", "finished_at")
    return Way(seconds, server, reads, {k: after[k] - before.get(k, 0.0) for k in after})


async def run(sizes: Sizes) -> list[Row]:
    n, c = sizes.peer_posts, sizes.concurrency
    ways: dict[str, Way] = {}
    with private_database() as db, launcher(db) as launch:
        pg = Pg(db)
        try:
            procs = {"worker": launch.worker(APP, 1, sizes.worker_threads)}
            procs["gateway"], base = launch.gateway(APP, 1)
            end = time.perf_counter() + sizes.deadline * 4
            await burst(base, sizes.peer_warmup, c, sizes.deadline)

            async def sweep() -> int:
                return (await burst(base, n, c, sizes.deadline)).status_reads

            candidates: dict[str, Callable[[], Awaitable[int]]] = {
                "sweep": sweep,
                "poll-100ms": lambda: closed_loop(base, n, c, 0.1, end),
                "poll-0ms": lambda: closed_loop(base, n, c, 0.0, end),
                "db-count": lambda: post_then_count(base, pg, n, c, end),
            }
            for name, how in candidates.items():
                ways[name] = await timed(how, pg, db, procs, n)
        finally:
            pg.close()
    return [
        Row(
            scenario="terminal",
            figure=f"{name}: {n:,} background no-ops terminal/s, as the client knows",
            value=n / way.seconds,
            unit="/s",
            better="higher",
            baseline=n / way.server_seconds,
            baseline_label="same burst, database's created->finished",
            details={
                "client_seconds": way.seconds,
                "server_seconds": way.server_seconds,
                "status_reads": way.reads,
                "cpu_seconds": way.cpu,
            },
        )
        for name, way in ways.items()
    ]
