"""A cheap SSE load client: raw asyncio sockets, in separate processes.

At thousands of connections an aiohttp client in the bench process spends as much CPU as the
gateway it measures, on the same cores, and one event loop reads the connections of a tick one
after another, so the last reader's latency was the client's. Here each connection is a bare
``asyncio.Protocol`` whose only work per read is to keep the bytes and the arrival time; frames are
parsed after the connection ends. The connections are split over ``CLIENT_PROCESSES`` processes,
which collect no garbage while they measure: a full collection over thousands of connections held
a process's loop for 30-60 ms (seen with ``gc.callbacks``), and every frame arriving meanwhile
was timed late, the client's delay counted as the gateway's.

The gateway's writes are whole SSE frames (one HTTP chunk each), so frames are found in the raw
byte stream by a pattern, and each frame's arrival time is that of the read that completed it.
Every request asks ``Connection: close``, so a stream ends with the socket.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import json
import multiprocessing
import re
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

from bench.procs import cpu_seconds

CLIENT_PROCESSES = 2
FRAME = re.compile(rb"id: (\d+)\nevent: ([^\n]*)\ndata: ([^\n]*)\n\n")
STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})")


@dataclass
class Stream:
    """What one connection received, parsed after it ended."""

    status: int
    first_frame_s: float  # request sent -> the first frame had arrived (nan: none)
    ticks: list[tuple[float, float]]  # (the tick's emit time ``t``, its arrival), wall clock
    last_type: str
    events: int


class _Conn(asyncio.Protocol):
    def __init__(self, request: bytes, closed: asyncio.Future[None]) -> None:
        self.request = request
        self.closed = closed
        self.started = time.time()
        self.reads: list[tuple[float, bytes]] = []
        self.transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.reads.append((time.time(), data))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def parsed(self) -> Stream:
        data = b"".join(chunk for _, chunk in self.reads)
        ends, total = [], 0
        for _, chunk in self.reads:
            total += len(chunk)
            ends.append(total)
        status = STATUS.match(data)
        ticks: list[tuple[float, float]] = []
        first, last_type, count = float("nan"), "", 0
        for match in FRAME.finditer(data):
            at = self.reads[bisect.bisect_left(ends, match.end())][0]
            count += 1
            last_type = match.group(2).decode()
            if count == 1:
                first = at - self.started
            if last_type == "tick":
                ticks.append((float(json.loads(match.group(3))["t"]), at))
        return Stream(int(status.group(1)) if status else 0, first, ticks, last_type, count)


@dataclass
class _Job:
    url: str
    paths: list[str]
    headers: dict[str, str]
    wave: int  # connections opened at a time (0: all at once)
    deadline: float
    pace: float = 0.0  # connections opened per second, evenly (0: in waves)


def _request(host: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _connect(url: str, path: str, headers: dict[str, str]) -> _Conn:
    loop = asyncio.get_running_loop()
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    conn = _Conn(_request(host, path, headers), loop.create_future())
    await loop.create_connection(lambda: conn, host, port)
    return conn


async def one_stream(url: str, path: str, headers: dict[str, str], deadline: float) -> Stream:
    """One connection read to its end, in this process (a baseline: the same client, alone)."""
    conn = await _connect(url, path, headers)
    await asyncio.wait_for(conn.closed, timeout=deadline)
    return conn.parsed()


async def _paced(job: _Job) -> list[_Conn]:
    """One connection every 1/pace s, on schedule however long the earlier ones take."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for k, path in enumerate(job.paths):
        delay = start + k / job.pace - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_connect(job.url, path, job.headers)))
    return list(await asyncio.gather(*tasks))


async def _run(job: _Job, pipe: Connection) -> None:
    loop = asyncio.get_running_loop()
    conns: list[_Conn] = []
    gc.collect()
    gc.disable()  # a full collection over thousands of connections stalls this loop for 30-60 ms
    pipe.send(("ready",))
    await loop.run_in_executor(None, pipe.recv)
    wave = job.wave or len(job.paths)
    end = time.monotonic() + job.deadline
    if job.pace:
        conns.extend(await _paced(job))
    for first in range(0, len(job.paths) if not job.pace else 0, wave):
        if time.monotonic() > end:
            break  # the rest are never opened: reported, not waited for
        batch = [_connect(job.url, path, job.headers) for path in job.paths[first : first + wave]]
        conns.extend(await asyncio.gather(*batch))
        while any(not c.reads and not c.closed.done() for c in conns):  # every head is back
            if time.monotonic() > end:
                break
            await asyncio.sleep(0.01)
    pipe.send(("opened", sum(1 for c in conns if c.reads), len(job.paths)))
    pending = [c.closed for c in conns if not c.closed.done()]
    if pending:
        await asyncio.wait(pending, timeout=job.deadline)
    for conn in conns:
        if conn.transport is not None and not conn.closed.done():
            conn.transport.abort()  # never ended: parsed as far as it got
    pipe.send(("done", [c.parsed() for c in conns]))


def _main(job: _Job, pipe: Connection) -> None:
    try:
        asyncio.run(_run(job, pipe))
    except BaseException as exc:
        pipe.send(("failed", f"{type(exc).__name__}: {exc}"))


class ClientPool:
    """``len(paths)`` SSE connections from ``processes`` client processes: started, they wait
    (``ready``); on ``go`` each opens its share, ``wave`` at a time (0: all at once), each wave
    once the previous one's answers began, or at ``pace`` connections per second in all;
    ``opened`` when all did; ``streams`` once every connection ended."""

    def __init__(
        self,
        url: str,
        paths: list[str],
        headers: dict[str, str],
        *,
        wave: int = 0,
        deadline: float = 300,
        pace: float = 0.0,
        processes: int = CLIENT_PROCESSES,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._pipes: list[Connection] = []
        self._procs: list[Any] = []
        self._deadline = deadline
        for k in range(processes):
            mine = paths[k::processes]
            if not mine:
                continue
            ours, theirs = context.Pipe()
            job = _Job(url, mine, headers, wave, deadline, pace / processes)
            proc = context.Process(target=_main, args=(job, theirs), daemon=True)
            proc.start()
            self._pipes.append(ours)
            self._procs.append(proc)

    async def _each(self, kind: str) -> list[tuple[Any, ...]]:
        end = time.monotonic() + self._deadline + 60  # the processes keep their own deadline
        got: list[tuple[Any, ...] | None] = [None] * len(self._pipes)
        while any(g is None for g in got):
            for n, pipe in enumerate(self._pipes):
                if got[n] is None and pipe.poll():
                    message = pipe.recv()
                    if message[0] == "failed":
                        raise RuntimeError(f"SSE client process failed: {message[1]}")
                    if message[0] != kind:
                        raise RuntimeError(f"SSE client process said {message[0]}, not {kind}")
                    got[n] = message
            if time.monotonic() > end:
                raise TimeoutError(f"SSE client processes not {kind} in time")
            await asyncio.sleep(0.005)
        return [g for g in got if g is not None]

    async def ready(self) -> None:
        await self._each("ready")

    def go(self) -> None:
        for pipe in self._pipes:
            pipe.send(("go",))

    async def opened(self) -> tuple[int, int]:
        """(connections whose answer began, connections asked for)."""
        got = await self._each("opened")
        return sum(m[1] for m in got), sum(m[2] for m in got)

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self._procs if p.pid is not None)

    async def streams(self) -> list[Stream]:
        out: list[Stream] = []
        for message in await self._each("done"):
            out.extend(message[1])
        return out

    def close(self) -> None:
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()


def refused(streams: list[Stream]) -> dict[int, int]:
    return dict(Counter(s.status for s in streams if s.status != 200))
