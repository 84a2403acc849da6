"""SSE at scale on ONE gateway process (1 gateway + 1 worker process, ``bench.apps:both``).

1. ``connections``: for each N in ``fanout_connections``, N SSE connections
   (``GET /api/invocations/{id}/events``, opened ``WAVE`` at a time) spread over N/100
   invocations that each emit one timestamped tick a second, out of step, until cancelled.
   Figures: emit → receive p50/p99 over the ``fanout_ticks`` s after every connection was open,
   and the gateway's resident memory per open connection ((RSS with N open − RSS idle) / N).
   Baselines: raw Redis pub/sub at the same pace with as many channels; the same gateway idle.
2. ``subscribers``: ``fanout_subscribers`` connections on ONE invocation ticking once a second;
   every tick must reach every one. Figure: emit → receive p50/p99.
3. ``reconnect storm``: ``storm_clients`` clients reconnect at once, each with ``after=k`` (k
   random) to one of ``storm_invocations`` finished invocations of ``storm_events`` events.
   Figure: request → first replayed event p50/p99, against the same reconnect made alone.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass

import aiohttp

from bench.load import owner_headers, percentile
from bench.peer_load import post_body
from bench.procs import Launcher, Proc, launcher, private_database, rss_mb
from bench.report import Row
from bench.scenarios.common import Pg, Sizes
from bench.scenarios.streaming import raw_pubsub_latencies
from bench.sse_clients import CLIENT_PROCESSES, ClientPool, Stream, one_stream, refused

APP = "bench.apps:both"
PER_INVOCATION = 100  # connections per ticking invocation in ``connections``
WAVE = 200  # connections opened at a time (the reconnect storm opens all at once)
OWNER = 0  # every stream is one owner's: only the owner may read an invocation's events


@dataclass
class Fanout:
    latencies: list[float]
    idle_mb: float
    open_mb: float
    connections: int
    open_s: float  # how long opening them all took
    client_cpu_s: float
    gateway_cpu_s: float  # over the ``window_s`` after all were open
    window_s: float
    refused: dict[int, int]  # answers other than 200 while opening, by status (0: none)
    client_window_cpu_s: float  # the client processes' CPU over the window
    missed_ticks: int  # streams that received fewer ticks of the window than were emitted
    not_ended: int  # streams that did not end with run.cancelled


def client(limit: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=60),
    )


def stream_headers() -> dict[str, str]:
    return {k: v for k, v in owner_headers(OWNER).items() if k != "Content-Type"}


async def start(http: aiohttp.ClientSession, base: str, input: object) -> str:
    invocation_id = str(uuid.uuid4())
    data = post_body(invocation_id, input, background=True)
    async with http.post(f"{base}/api/invocations", data=data, headers=owner_headers(OWNER)) as r:
        if r.status != 202:
            raise RuntimeError(f"POST answered {r.status}")
    return invocation_id


async def fanout(
    base: str, gateway: Proc, connections: int, invocations: int, ticks: int, deadline: float
) -> Fanout:
    """``connections`` streams over ``invocations`` invocations ticking once a second, measured
    over ``ticks`` s once every connection is open; then the invocations are cancelled, which
    ends every stream with ``run.cancelled``. The streams are read by :mod:`bench.sse_clients`
    (raw sockets, separate processes)."""
    idle = rss_mb(gateway)
    async with client(10) as http:
        # ticking until cancelled (at most an hour), out of step: stream i ticks i/m s late
        ids = [
            await start(http, base, {"events": 3600, "interval": 1.0, "offset": i / invocations})
            for i in range(invocations)
        ]
        paths = [f"/api/invocations/{ids[k % invocations]}/events" for k in range(connections)]
        wave = WAVE // CLIENT_PROCESSES  # per process: WAVE at a time in all
        pool = ClientPool(base, paths, stream_headers(), wave=wave, deadline=deadline)
        try:
            await pool.ready()
            client0 = pool.cpu_seconds()
            started = time.perf_counter()
            pool.go()
            await pool.opened()
            open_s, open_at = time.perf_counter() - started, time.time()
            await asyncio.sleep(1.0)
            open_mb = rss_mb(gateway)
            cpu_open, client_open = gateway.cpu_seconds(), pool.cpu_seconds()
            await asyncio.sleep(ticks)
            window_end = time.time()
            gateway_cpu = gateway.cpu_seconds() - cpu_open
            client_window = pool.cpu_seconds() - client_open
            client_cpu = pool.cpu_seconds() - client0
            for invocation_id in ids:
                url = f"{base}/api/invocations/{invocation_id}/cancel"
                async with http.post(url, headers=owner_headers(OWNER)) as r:
                    await r.read()
            streams = await pool.streams()
        finally:
            pool.close()
    served = [s for s in streams if s.status == 200]
    latencies = [[at - t for t, at in s.ticks if open_at <= t <= window_end] for s in served]
    short = sum(1 for lat in latencies if len(lat) < ticks - 1)
    ended = sum(1 for s in served if s.last_type == "run.cancelled")
    if not served:
        raise RuntimeError(f"no stream opened: {refused(streams)}")
    unanswered = refused(streams)
    if len(streams) < connections:  # never tried: the opening deadline passed first
        unanswered[0] = unanswered.get(0, 0) + connections - len(streams)
    return Fanout(
        [x for lat in latencies for x in lat],
        idle,
        open_mb,
        connections,
        open_s,
        client_cpu,
        gateway_cpu,
        ticks,
        unanswered,
        client_window,
        short,
        len(served) - ended,
    )


@dataclass
class Storm:
    alone: list[float]  # request -> first replayed frame, each reconnect alone
    together: list[float]  # the same, all ``clients`` at once (or at ``pace`` per second)
    span_s: float  # the first request -> the last stream's end
    gateway_cpu_s: float  # over the storm
    client_cpu_s: float


async def storm(
    base: str,
    gateway: Proc,
    clients: int,
    invocations: int,
    events: int,
    deadline: float,
    pace: float = 0.0,
) -> Storm:
    """Reconnects with a random ``after``, each alone, then ``clients`` all at once (or
    ``pace`` per second)."""
    async with client(10) as http:
        ids = [await start(http, base, {"events": events}) for _ in range(invocations)]
        done: set[str] = set()
        end = time.perf_counter() + deadline
        while len(done) < len(ids) and time.perf_counter() < end:
            for invocation_id in ids:
                url = f"{base}/api/invocations/{invocation_id}"
                async with http.get(url, headers=owner_headers(OWNER)) as r:
                    if (await r.json())["status"] == "completed":
                        done.add(invocation_id)
            await asyncio.sleep(0.1)
    rng = random.Random(13)

    def reconnect_path() -> str:
        return f"/api/invocations/{rng.choice(ids)}/events?after={rng.randrange(events)}"

    def firsts(streams: list[Stream]) -> list[float]:
        if any(s.status != 200 or s.last_type != "run.completed" for s in streams):
            raise RuntimeError(f"reconnects answered {refused(streams)} or ended early")
        return [s.first_frame_s for s in streams]

    alone = firsts(
        [await one_stream(base, reconnect_path(), stream_headers(), deadline) for _ in range(50)]
    )
    paths = [reconnect_path() for _ in range(clients)]
    pool = ClientPool(base, paths, stream_headers(), pace=pace)
    try:
        await pool.ready()
        cpu0, client0, started = gateway.cpu_seconds(), pool.cpu_seconds(), time.perf_counter()
        pool.go()
        await pool.opened()
        together = firsts(await pool.streams())
        span = time.perf_counter() - started
        cpu, client_cpu = gateway.cpu_seconds() - cpu0, pool.cpu_seconds() - client0
    finally:
        pool.close()
    return Storm(alone, together, span, cpu, client_cpu)


def fanout_rows(label: str, got: Fanout, raw: list[float], ticks: int) -> list[Row]:
    details = {
        "connections": got.connections,
        "ticks": ticks,
        "samples": len(got.latencies),
        "open_s": got.open_s,
        "client_cpu_s": got.client_cpu_s,
        "refused": got.refused,
        "streams_missing_ticks": got.missed_ticks,
        "streams_not_ended": got.not_ended,
        "gateway_cpu_per_s_of_window": got.gateway_cpu_s / got.window_s,
        "client_cpu_per_s_of_window": got.client_window_cpu_s / got.window_s,
        "gateway_cpu_ms_per_delivery": got.gateway_cpu_s * 1000 / max(1, len(got.latencies)),
        "gateway_idle_mb": got.idle_mb,
        "gateway_open_mb": got.open_mb,
    }
    rows = [
        Row(
            scenario="fanout",
            figure=f"{label}: emit->receive p{q} ms",
            value=percentile(got.latencies, q) * 1000,
            unit="ms",
            better="lower",
            baseline=percentile(raw, q) * 1000,
            baseline_label="raw Redis pub/sub",
            details=details,
        )
        for q in (50, 99)
    ]
    rows.append(
        Row(
            scenario="fanout",
            figure=f"{label}: connections refused while opening",
            value=float(sum(got.refused.values())),
            unit="",
            better="lower",
            details=details,
        )
    )
    rows.append(
        Row(
            scenario="fanout",
            figure=f"{label}: gateway RSS with all open (KB per connection in details)",
            value=got.open_mb,
            unit="MB",
            better="lower",
            baseline=got.idle_mb,
            baseline_label="same gateway, idle",
            details={
                **details,
                "kb_per_connection": (got.open_mb - got.idle_mb) * 1024 / got.connections,
            },
        )
    )
    return rows


async def tether(launch: Launcher, concurrency: int) -> tuple[Proc, str]:
    extra = {"TETHER_WORKER__CONCURRENCY": str(concurrency)}
    launch.worker(APP, 1, 4, extra=extra)
    return launch.gateway(APP, 1)


async def run(sizes: Sizes) -> list[Row]:
    """The storm first, on a fresh gateway, then one invocation's subscribers, then the
    connection counts upwards: a count the machine cannot open in time is a row, not a failure
    of the rows before it."""
    rows: list[Row] = []
    ticks = sizes.fanout_ticks
    with private_database() as db, launcher(db) as launch:
        pg = Pg(db)
        try:
            gateway, base = await tether(launch, 2000)
            got_storm = await storm(base, gateway, sizes.storm_clients, *storm_size(sizes))
            rows += storm_rows(sizes, got_storm, "at once")
            paced = sizes.storm_rate * sizes.storm_seconds
            got_storm = await storm(
                base, gateway, paced, *storm_size(sizes), pace=float(sizes.storm_rate)
            )
            rows += storm_rows(
                sizes, got_storm, f"{sizes.storm_rate:,}/s for {sizes.storm_seconds} s"
            )
            n = sizes.fanout_subscribers
            raw = await raw_pubsub_latencies(1, ticks, 1.0)
            got = await fanout(base, gateway, n, 1, ticks, sizes.deadline)
            rows += fanout_rows(f"{n:,} subscribers on 1 invocation", got, raw, ticks)[:3]
            for n in sizes.fanout_connections:
                m = max(1, n // PER_INVOCATION)
                label = f"{n:,} SSE connections, {m} invocations"
                raw = await raw_pubsub_latencies(m, ticks, 1.0)
                try:
                    got = await fanout(base, gateway, n, m, ticks, sizes.deadline)
                except (RuntimeError, TimeoutError) as exc:
                    rows.append(failed_row(label, exc))
                    break
                rows += fanout_rows(label, got, raw, ticks)
        finally:
            pg.close()
    return rows


def storm_size(sizes: Sizes) -> tuple[int, int, float]:
    return sizes.storm_invocations, sizes.storm_events, 120.0


def failed_row(label: str, exc: Exception) -> Row:
    return Row(
        scenario="fanout",
        figure=f"{label}: FAILED",
        value=float("nan"),
        unit="",
        better="lower",
        details={"error": f"{type(exc).__name__}: {exc}"},
    )


def storm_rows(sizes: Sizes, got: Storm, how: str) -> list[Row]:
    label = (
        f"reconnect storm, {len(got.together):,} clients {how}, after=random "
        f"({sizes.storm_invocations} finished invocations x {sizes.storm_events} events)"
    )
    return [
        Row(
            scenario="fanout",
            figure=f"{label}: first replayed event p{q} ms",
            value=percentile(got.together, q) * 1000,
            unit="ms",
            better="lower",
            baseline=percentile(got.alone, q) * 1000,
            baseline_label="the same reconnect alone",
            details={
                "clients": len(got.together),
                "alone_samples": len(got.alone),
                "span_s": got.span_s,
                "gateway_cpu_s": got.gateway_cpu_s,
                "gateway_cpu_ms_per_reconnect": got.gateway_cpu_s * 1000 / len(got.together),
                "client_cpu_s": got.client_cpu_s,
            },
        )
        for q in (50, 99)
    ]
