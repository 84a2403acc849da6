"""What a status read costs when the invocation's input is large: 1 gateway + 1 worker process,
two sets of finished no-ops, one posted with a conversation as its input (``status_messages``
messages of ~300 characters, ~64 KB of JSON) and one with ``{}``. Every status of a set is read
in sweeps of ``concurrency`` (``GET /api/invocations/{id}``, the peer's client), the two sets
alternating for ``status_rounds`` rounds each.

Per read: the gateway's CPU, PostgreSQL's backends' CPU and the reads a second, the medians of
the rounds, the conversation's set against the ``{}`` set. No answer shows an input, so a read
need not fetch one: since the thirty-fourth session no status read does (before, each read
fetched, shipped and decoded it, and the gateway spent ~2.5x its CPU on such a read).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from bench.peer_load import TERMINAL, post_all, read_statuses
from bench.procs import Database, Proc, cpu_seconds, launcher, private_database
from bench.raw_http import request_client
from bench.report import Row
from bench.scenarios.common import Sizes

APP = "bench.apps:noop"
SETS = ("conversation", "empty")


def conversation(messages: int) -> dict[str, Any]:
    """An agent's input as it grows: the conversation so far."""
    return {
        "messages": [
            {"role": "user" if n % 2 == 0 else "assistant", "content": f"{n:04d} " + "x" * 295}
            for n in range(messages)
        ]
    }


@dataclass
class Sweep:
    seconds: float
    gateway_cpu: float
    postgres_cpu: float


def backends_cpu(db: Database) -> float:
    return sum(cpu_seconds(pid) for pid in db.backend_pids())


async def sweep(base: str, ids: list[str], gateway: Proc, db: Database, c: int) -> Sweep:
    pending = {invocation_id: n for n, invocation_id in enumerate(ids)}
    gateway0, postgres0 = gateway.cpu_seconds(), backends_cpu(db)
    started = time.perf_counter()
    async with request_client(base, c) as http:
        seen = await read_statuses(http, pending, c)
    seconds = time.perf_counter() - started
    if len(seen) != len(ids) or not set(seen.values()) <= TERMINAL:
        raise RuntimeError(f"a sweep read {len(seen)} statuses: {set(seen.values())}")
    return Sweep(seconds, gateway.cpu_seconds() - gateway0, backends_cpu(db) - postgres0)


async def run(sizes: Sizes) -> list[Row]:
    n, c = sizes.status_reads, sizes.concurrency
    inputs = {"conversation": conversation(sizes.status_messages), "empty": {}}
    ids = {name: [str(uuid.uuid4()) for _ in range(n)] for name in SETS}
    sweeps: dict[str, list[Sweep]] = {name: [] for name in SETS}
    with private_database() as db, launcher(db) as launch:
        launch.worker(APP, 1, sizes.worker_threads)
        gateway, base = launch.gateway(APP, 1)
        end = time.perf_counter() + sizes.deadline
        async with request_client(base, c) as http:
            for name in SETS:
                answers = await post_all(http, ids[name], c, end, input=inputs[name])
                if answers.get(202) != n:
                    raise RuntimeError(f"posting the {name} set answered {dict(answers)}")
        for name in SETS:  # until every one has finished (which also warms both sets' reads)
            while not set(seen := await statuses(base, ids[name], c)) <= TERMINAL:
                if time.perf_counter() > end:
                    raise TimeoutError(f"the {name} set did not finish in time: {dict(seen)}")
                await asyncio.sleep(0.2)
        for r in range(sizes.status_rounds):
            for name in SETS if r % 2 == 0 else SETS[::-1]:
                sweeps[name].append(await sweep(base, ids[name], gateway, db, c))
    return rows(sweeps, n, sizes.status_messages, c)


async def statuses(base: str, ids: list[str], c: int) -> Counter[str]:
    async with request_client(base, c) as http:
        pending = {invocation_id: n for n, invocation_id in enumerate(ids)}  # n: its owner
        return Counter((await read_statuses(http, pending, c)).values())


def rows(sweeps: dict[str, list[Sweep]], n: int, messages: int, c: int) -> list[Row]:
    size = len(json.dumps(conversation(messages))) / 1024
    label = f"{n:,} reads of invocations whose input is {messages} messages ({size:.0f} KB)"

    def per_set(of: str, per_read: Callable[[float], float]) -> dict[str, float]:
        """Each set's median of the sweeps' ``of``, as a figure per read."""
        return {
            name: per_read(statistics.median(getattr(s, of) for s in sweeps[name])) for name in SETS
        }

    figures: list[tuple[str, str, Literal["higher", "lower"], dict[str, float]]] = [
        (
            "gateway CPU us per status read",
            "us",
            "lower",
            per_set("gateway_cpu", lambda s: s * 1e6 / n),
        ),
        (
            "PostgreSQL CPU us per status read",
            "us",
            "lower",
            per_set("postgres_cpu", lambda s: s * 1e6 / n),
        ),
        (f"status reads/s at c={c}", "/s", "higher", per_set("seconds", lambda s: n / s)),
    ]
    details = {name: [s.__dict__ for s in sweeps[name]] for name in SETS}
    return [
        Row(
            scenario="statusreads",
            figure=f"{figure}, {label}",
            value=values["conversation"],
            unit=unit,
            better=better,
            baseline=values["empty"],
            baseline_label="the same reads, input {}",
            details=details if k == 0 else {},
        )
        for k, (figure, unit, better, values) in enumerate(figures)
    ]
