"""The peer scenario's client: the same requests against any server of the invocation protocol.

Everything goes through the HTTP protocol Tether shares with AgentKit (``POST /api/invocations``,
``GET /api/invocations/{id}``), so one client measures both; no figure reads a server's
database. Every loop is bounded by a count and a deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.load import Received, owner_headers, percentile, session, stream
from bench.raw_http import Requests, request_client

INVOCATIONS = "/api/invocations"
TERMINAL = frozenset({"completed", "failed", "cancelled"})


def post_body(invocation_id: str, input: Any = None, **modes: bool) -> bytes:
    return json.dumps(
        {"id": invocation_id, "input": {} if input is None else input, **modes}
    ).encode()


@dataclass
class Burst:
    """``count`` background no-ops posted at ``concurrency``, then each one's status read until
    every one is terminal, as a client that wants the results must."""

    accepted_per_s: float
    posting_s: float
    terminal_s: float  # first POST -> the client has seen every invocation terminal
    status_reads: int  # GETs it took (the floor is one per invocation)
    sweeps: int
    statuses: dict[str, int] = field(default_factory=dict)


async def post_all(
    http: Requests, ids: list[str], concurrency: int, deadline: float, input: Any = None
) -> Counter[int]:
    """Post ``ids`` as background invocations of ``input``, ``concurrency`` at a time, the
    owners cycling (``owner_headers``), until ``deadline`` (``perf_counter``); the answers'
    statuses."""
    answers: Counter[int] = Counter()
    todo = iter(enumerate(ids))

    async def loop() -> None:
        for i, invocation_id in todo:
            if time.perf_counter() > deadline:
                return
            data = post_body(invocation_id, input, background=True)
            answer = await http.request("POST", INVOCATIONS, data, owner_headers(i))
            answers[answer.status] += 1

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return answers


async def read_statuses(
    http: Requests, pending: dict[str, int], concurrency: int
) -> dict[str, str]:
    """One sweep: the status of every pending invocation, ``concurrency`` reads at a time."""
    seen: dict[str, str] = {}
    todo = iter(list(pending.items()))

    async def loop() -> None:
        for invocation_id, i in todo:
            answer = await http.request(
                "GET", f"{INVOCATIONS}/{invocation_id}", b"", owner_headers(i)
            )
            seen[invocation_id] = str(json.loads(answer.body).get("status"))

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return seen


async def burst(base: str, count: int, concurrency: int, deadline: float) -> Burst:
    ids = [str(uuid.uuid4()) for _ in range(count)]
    end = time.perf_counter() + deadline
    async with request_client(base, concurrency) as http:
        started = time.perf_counter()
        answers = await post_all(http, ids, concurrency, end)
        posted = time.perf_counter()
        if answers != Counter({202: count}):
            raise RuntimeError(f"unexpected answers while posting: {dict(answers)}")
        pending = {invocation_id: i for i, invocation_id in enumerate(ids)}
        final: Counter[str] = Counter()
        reads = sweeps = 0
        while pending:
            if time.perf_counter() > end:
                raise TimeoutError(f"{len(pending)} of {count} invocations still not terminal")
            seen = await read_statuses(http, pending, concurrency)
            reads, sweeps = reads + len(seen), sweeps + 1
            for invocation_id, status in seen.items():
                if status in TERMINAL:
                    final[status] += 1
                    del pending[invocation_id]
        done = time.perf_counter()
    return Burst(
        accepted_per_s=count / (posted - started),
        posting_s=posted - started,
        terminal_s=done - started,
        status_reads=reads,
        sweeps=sweeps,
        statuses=dict(final),
    )


@dataclass
class SyncRun:
    completed: int
    elapsed: float
    latencies: list[float]

    @property
    def per_s(self) -> float:
        return self.completed / self.elapsed if self.elapsed else float("nan")


async def sync_rate(base: str, concurrency: int, count: int, duration: float) -> SyncRun:
    """Sync no-ops from ``concurrency`` loops, until ``count`` are issued or ``duration`` s pass;
    the clock stops at the last answer."""
    latencies: list[float] = []
    issued = 0
    stop_issuing = time.perf_counter() + duration

    async def loop(http: Requests, k: int) -> None:
        nonlocal issued
        while issued < count and time.perf_counter() < stop_issuing:
            issued += 1
            t0 = time.perf_counter()
            data = post_body(str(uuid.uuid4()))
            answer = await http.request("POST", INVOCATIONS, data, owner_headers(k))
            if answer.status != 200:
                raise RuntimeError(f"sync invocation answered {answer.status}")
            latencies.append(time.perf_counter() - t0)

    async with request_client(base, concurrency) as http:
        started = time.perf_counter()
        await asyncio.gather(*(loop(http, k) for k in range(concurrency)))
        elapsed = time.perf_counter() - started
    return SyncRun(len(latencies), elapsed, latencies)


@dataclass
class Streams:
    emit_to_receive: list[float]  # per tick: the handler's emit -> the client has the frame
    first_event: list[float]  # per stream: POST -> first frame
    whole: list[float]  # per stream: POST -> terminal frame

    def p(self, which: str, q: float) -> float:
        values: list[float] = getattr(self, which)
        return percentile(values, q)


async def streams(
    base: str, total: int, concurrency: int, events: int, interval: float, deadline: float
) -> Streams:
    """``total`` streamed invocations (``stream: true``), ``concurrency`` at a time, each
    emitting ``events`` ticks ``interval`` s apart."""
    out = Streams([], [], [])
    todo = iter(range(total))

    def on_tick(event: Received) -> None:
        if event.type == "tick":
            out.emit_to_receive.append(event.at - float(event.data["t"]))

    async def loop(http: aiohttp.ClientSession) -> None:
        for i in todo:
            started = time.time()
            got = await stream(http, base, {"events": events, "interval": interval}, i, on_tick)
            ticks = sum(1 for e in got if e.type == "tick")
            if ticks != events or got[-1].type != "run.completed":
                raise RuntimeError(f"stream {i}: {ticks} of {events} ticks, then {got[-1].type}")
            out.first_event.append(got[0].at - started)
            out.whole.append(got[-1].at - started)

    async with session(concurrency) as http:
        await asyncio.wait_for(
            asyncio.gather(*(loop(http) for _ in range(concurrency))), timeout=deadline
        )
    return out
