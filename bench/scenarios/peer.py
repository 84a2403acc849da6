"""The peer: Databricks AgentKit's ``DurableAgentServer`` and Tether, one after the other in the
same run, the same handler (``bench.apps.noop_or_ticks``) and the same client
(``bench/peer_load.py``, the HTTP protocol only).

Servers, each started fresh, warmed up, measured, stopped:

- ``agentkit-postgres``: AgentKit on its PostgreSQL store (one uvicorn process);
- ``agentkit-memory``: AgentKit on its in-memory store (one process, what ``agentbricks dev`` runs);
- ``tether-distributed``: 1 ``tether gateway`` + 1 ``tether worker`` process (4 threads);
- ``tether-dev``: ``tether dev`` on its default SQLite file (one process).

Figures, per server: background accepts/s (``peer_posts`` POSTs at ``concurrency``); seconds from
the first of those POSTs until the client has read every one of them terminal (status reads at
the same concurrency, in sweeps, after posting: see docs/performance.md for why this and not a
database count); sync no-ops/s at each of ``peer_sync_concurrency``; stream latency for
``peer_streams`` streamed invocations of ``peer_stream_events`` ticks, ``peer_stream_concurrency``
at a time. Each Tether mode is printed against its AgentKit counterpart (durable against durable,
embedded against in-memory); the rows' details hold all four servers' figures.

Skipped, with a message, when AgentKit is not installed (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Literal

from bench.load import percentile
from bench.peer_load import burst, streams, sync_rate
from bench.procs import Launcher, Proc, launcher, private_database
from bench.report import Row
from bench.scenarios.common import Sizes

APP = "bench.apps:both"
SERVERS = ("agentkit-postgres", "agentkit-memory", "tether-distributed", "tether-dev")
PAIRS = (("tether-distributed", "agentkit-postgres"), ("tether-dev", "agentkit-memory"))


@dataclass
class Figures:
    """One server's figures, and the CPU its processes and the client spent on the burst."""

    accepted_per_s: float
    terminal_s: float
    status_reads: int
    sync_per_s: dict[int, float]
    sync_p50_ms: dict[int, float]
    emit_p50_ms: float
    emit_p99_ms: float
    first_p50_ms: float
    whole_p50_ms: float
    whole_p99_ms: float
    burst_server_cpu_s: float
    burst_client_cpu_s: float


@contextmanager
def serving(launch: Launcher, name: str) -> Iterator[tuple[list[Proc], str]]:
    if name.startswith("agentkit-"):
        proc, base = launch.peer(name.removeprefix("agentkit-"))
        procs = [proc]
    elif name == "tether-dev":
        proc, base = launch.dev(APP, db="file")
        procs = [proc]
    else:
        procs = [launch.worker(APP, 1, 4)]
        gateway, base = launch.gateway(APP, 1)
        procs.append(gateway)
    try:
        yield procs, base
    finally:
        for proc in procs:
            launch.stop(proc)


async def measure(procs: list[Proc], base: str, sizes: Sizes) -> Figures:
    c = sizes.concurrency
    await burst(base, sizes.peer_warmup, c, sizes.deadline)
    await sync_rate(base, 1, 3, sizes.deadline)
    server0, client0 = sum(p.cpu_seconds() for p in procs), time.process_time()
    b = await burst(base, sizes.peer_posts, c, sizes.deadline)
    server1, client1 = sum(p.cpu_seconds() for p in procs), time.process_time()
    sync = {
        k: await sync_rate(base, k, sizes.peer_sync_count, sizes.peer_sync_seconds)
        for k in sizes.peer_sync_concurrency
    }
    s = await streams(
        base,
        sizes.peer_streams,
        sizes.peer_stream_concurrency,
        sizes.peer_stream_events,
        sizes.peer_stream_interval,
        sizes.deadline,
    )
    return Figures(
        accepted_per_s=b.accepted_per_s,
        terminal_s=b.terminal_s,
        status_reads=b.status_reads,
        sync_per_s={k: r.per_s for k, r in sync.items()},
        sync_p50_ms={k: percentile(r.latencies, 50) * 1000 for k, r in sync.items()},
        emit_p50_ms=s.p("emit_to_receive", 50) * 1000,
        emit_p99_ms=s.p("emit_to_receive", 99) * 1000,
        first_p50_ms=s.p("first_event", 50) * 1000,
        whole_p50_ms=s.p("whole", 50) * 1000,
        whole_p99_ms=s.p("whole", 99) * 1000,
        burst_server_cpu_s=server1 - server0,
        burst_client_cpu_s=client1 - client0,
    )


Getter = tuple[str, str, Literal["higher", "lower"], Any]


def getters(sizes: Sizes) -> list[Getter]:
    n, c = sizes.peer_posts, sizes.concurrency
    stream_label = (
        f"{sizes.peer_streams} streams x {sizes.peer_stream_events} events, "
        f"c={sizes.peer_stream_concurrency}"
    )
    out: list[Getter] = [
        (f"background accepts/s, {n:,} at c={c}", "/s", "higher", lambda f: f.accepted_per_s),
        (f"s until all {n:,} terminal (client reads)", "s", "lower", lambda f: f.terminal_s),
    ]
    for k in sizes.peer_sync_concurrency:
        out.append((f"sync no-ops/s at c={k}", "/s", "higher", lambda f, k=k: f.sync_per_s[k]))
    out += [
        (f"emit->receive p50 ms, {stream_label}", "ms", "lower", lambda f: f.emit_p50_ms),
        (f"emit->receive p99 ms, {stream_label}", "ms", "lower", lambda f: f.emit_p99_ms),
        (f"POST->terminal p50 ms, {stream_label}", "ms", "lower", lambda f: f.whole_p50_ms),
        (f"POST->terminal p99 ms, {stream_label}", "ms", "lower", lambda f: f.whole_p99_ms),
    ]
    return out


def rows_for(figures: dict[str, Figures], sizes: Sizes) -> list[Row]:
    everything = {name: asdict(f) for name, f in figures.items()}
    rows = []
    for ours, theirs in PAIRS:
        for label, unit, better, get in getters(sizes):
            rows.append(
                Row(
                    scenario="peer",
                    figure=f"{ours}: {label}",
                    value=float(get(figures[ours])),
                    unit=unit,
                    better=better,
                    baseline=float(get(figures[theirs])),
                    baseline_label=theirs,
                    details={"servers": everything},
                )
            )
    return rows


def agentkit_missing(scenario: str) -> bool:
    """True (and says so) when AgentKit is not installed: ``scenario`` is skipped."""
    if importlib.util.find_spec("databricks_agentkit") is not None:
        return False
    print(
        f"[bench] {scenario}: skipped, AgentKit is not installed "
        "(pip install -e '.[bench]' installs databricks-agentbricks)",
        file=sys.stderr,
    )
    return True


async def run(sizes: Sizes) -> list[Row]:
    if agentkit_missing("peer"):
        return []
    figures: dict[str, Figures] = {}
    with private_database() as db, launcher(db) as launch:
        for name in SERVERS:
            print(f"[bench] peer: {name} ...", file=sys.stderr, flush=True)
            with serving(launch, name) as (procs, base):
                figures[name] = await measure(procs, base, sizes)
            print(f"[bench] peer: {name}: {figures[name]}", file=sys.stderr, flush=True)
    return rows_for(figures, sizes)
