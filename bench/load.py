"""The load client: aiohttp over loopback, every loop bounded by a count or a deadline."""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

OWNERS = 256  # requests cycle through this many owners, as many users would
TIMEOUT = aiohttp.ClientTimeout(total=120)


def session(limit: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, force_close=False), timeout=TIMEOUT
    )


def body(input: Any = None, **modes: bool) -> bytes:
    return json.dumps(
        {"id": str(uuid.uuid4()), "input": {} if input is None else input, **modes}
    ).encode()


def owner_headers(i: int) -> dict[str, str]:
    return {"Content-Type": "application/json", "X-Forwarded-User": f"bench-{i % OWNERS}"}


@dataclass
class Poster:
    """``concurrency`` loops posting background invocations until ``count`` or ``deadline``."""

    base: str
    concurrency: int
    input: Any = None
    statuses: Counter[int] = field(default_factory=Counter)
    posted: int = 0  # accepted (202) so far
    elapsed: float = 0.0

    async def run(self, count: int | None = None, duration: float | None = None) -> None:
        assert count is not None or duration is not None
        url = f"{self.base}/api/invocations"
        issued = 0
        deadline = time.perf_counter() + duration if duration is not None else float("inf")

        async def loop(http: aiohttp.ClientSession, k: int) -> None:
            nonlocal issued
            headers = owner_headers(k)
            while (count is None or issued < count) and time.perf_counter() < deadline:
                issued += 1
                async with http.post(
                    url, data=body(self.input, background=True), headers=headers
                ) as r:
                    await r.read()
                    self.statuses[r.status] += 1
                    if r.status == 202:
                        self.posted += 1

        started = time.perf_counter()
        async with session(self.concurrency) as http:
            await asyncio.gather(*(loop(http, k) for k in range(self.concurrency)))
        self.elapsed = time.perf_counter() - started

    def check(self) -> None:
        bad = {s: n for s, n in self.statuses.items() if s != 202}
        if bad:
            raise RuntimeError(f"unexpected answers while posting: {bad}")


async def post_background(base: str, count: int, concurrency: int, input: Any = None) -> Poster:
    poster = Poster(base, concurrency, input)
    await poster.run(count=count)
    poster.check()
    return poster


async def sync_latencies(base: str, count: int, input: Any = None) -> list[float]:
    """Seconds per sync invocation, one after another (each waits for its result)."""
    url = f"{base}/api/invocations"
    out: list[float] = []
    async with session(1) as http:
        for i in range(count):
            data = body(input)
            started = time.perf_counter()
            async with http.post(url, data=data, headers=owner_headers(i)) as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"sync invocation answered {r.status}")
            out.append(time.perf_counter() - started)
    return out


@dataclass(frozen=True)
class Received:
    cursor: int
    type: str
    data: Any
    at: float  # time.time() when the client had it


async def stream(
    http: aiohttp.ClientSession,
    base: str,
    input: Any,
    i: int = 0,
    on_event: Callable[[Received], None] | None = None,
) -> list[Received]:
    """POST with ``stream: true`` and read the SSE answer to its end."""
    async with http.post(
        f"{base}/api/invocations", data=body(input, stream=True), headers=owner_headers(i)
    ) as r:
        if r.status != 200:
            raise RuntimeError(f"stream answered {r.status}")
        return await read_sse(r, on_event)


async def read_sse(
    r: aiohttp.ClientResponse, on_event: Callable[[Received], None] | None = None
) -> list[Received]:
    """Every event of an SSE answer, read to its end."""
    events: list[Received] = []
    fields: dict[str, str] = {}
    async for raw in r.content:
        line = raw.decode().rstrip("\n")
        if line.startswith(":"):
            continue
        if line:
            key, _, value = line.partition(": ")
            fields[key] = value
            continue
        if fields:
            event = Received(
                int(fields["id"]), fields["event"], json.loads(fields["data"]), time.time()
            )
            events.append(event)
            if on_event is not None:
                on_event(event)
            fields = {}
    return events


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]
