"""What a large input costs: two sets of background no-ops on 1 gateway + 1 worker process, one
posted with a conversation as its input (``large_input_messages`` messages of ~300 characters,
66 KB of JSON), one with ``{}``; each figure of the first set beside the second's.

1. **Accepts**, with no worker running yet: ``large_input_rounds`` rounds, each posting
   ``large_input_posts / rounds`` fresh ids of each set at ``concurrency`` (the peer's client),
   the sets alternating.
2. **Status reads**: the worker started and every invocation finished, every status of a set
   read in sweeps at ``concurrency`` (``GET /api/invocations/{id}``), the sets alternating for
   ``large_input_rounds`` sweeps each.

Per accept and per read: the gateway's CPU, PostgreSQL's backends' CPU, and the rate (medians
of the rounds; CPU counts in 10-ms ticks). No answer shows an input, so a read need not fetch
one: since the thirty-fourth session none does (before, a read of the conversation set cost the
gateway ~2.5x the CPU of the ``{}`` set's), and an accept encodes it once for the insert.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from bench.peer_load import TERMINAL, post_all, read_statuses
from bench.procs import Database, Proc, cpu_seconds, launcher, private_database
from bench.raw_http import Requests, request_client
from bench.report import Row
from bench.scenarios.common import Sizes

APP = "bench.apps:noop"
SETS = ("conversation", "empty")


VOCABULARY = (
    "the a to of and in is it you that for on with as this be are was have not at or from by "
    "agent tool call result model answer question file table query error retry plan step user "
    "approval input output stream event token cost budget session thread wait resume timer"
)


def conversation(messages: int) -> dict[str, Any]:
    """An agent's input as it grows: the conversation so far, ~300 characters a message of
    words in a seeded random order (text that compresses as prose does: the same characters
    repeated would shrink to almost nothing in PostgreSQL's TOAST)."""
    words, pick = VOCABULARY.split(), random.Random(messages)

    def content() -> str:
        text = ""
        while len(text) < 300:
            text += pick.choice(words) + " "
        return text.rstrip()

    return {
        "messages": [
            {"role": "user" if n % 2 == 0 else "assistant", "content": content()}
            for n in range(messages)
        ]
    }


@dataclass
class Phase:
    seconds: float
    gateway_cpu: float
    postgres_cpu: float


def backends_cpu(db: Database) -> dict[int, float]:
    return {pid: cpu_seconds(pid) for pid in db.backend_pids()}


async def measured(work: Awaitable[object], gateway: Proc, db: Database) -> Phase:
    """``work``'s seconds and CPU: the gateway's, and that of the backends connected before and
    after it (one that came or went meanwhile would count its whole life, or none of it)."""
    gateway0, backends0 = gateway.cpu_seconds(), backends_cpu(db)
    started = time.perf_counter()
    await work
    seconds = time.perf_counter() - started
    backends1 = backends_cpu(db)
    postgres = sum(backends1[pid] - cpu for pid, cpu in backends0.items() if pid in backends1)
    return Phase(seconds, gateway.cpu_seconds() - gateway0, postgres)


async def post(http: Requests, ids: list[str], input: Any, c: int, end: float) -> None:
    answers = await post_all(http, ids, c, end, input=input)
    if answers.get(202) != len(ids):
        raise RuntimeError(f"posting answered {dict(answers)}")


async def statuses(http: Requests, ids: dict[str, int], c: int) -> Counter[str]:
    """Every status of ``ids`` (id → its place in its post, which named its owner) read once."""
    return Counter((await read_statuses(http, ids, c)).values())


async def sweep(http: Requests, ids: dict[str, int], c: int) -> None:
    seen = await statuses(http, ids, c)
    if sum(seen.values()) != len(ids) or not set(seen) <= TERMINAL:
        raise RuntimeError(f"a sweep read {dict(seen)}")


async def run(sizes: Sizes) -> list[Row]:
    c, rounds = sizes.concurrency, sizes.large_input_rounds
    per_round = sizes.large_input_posts // rounds
    inputs = {"conversation": conversation(sizes.large_input_messages), "empty": {}}
    ids: dict[str, dict[str, int]] = {name: {} for name in SETS}
    accepts: dict[str, list[Phase]] = {name: [] for name in SETS}
    reads: dict[str, list[Phase]] = {name: [] for name in SETS}
    with private_database() as db, launcher(db) as launch:
        gateway, base = launch.gateway(APP, 1)
        end = time.perf_counter() + sizes.deadline
        async with request_client(base, c) as http:  # its connections made before any round
            for r in range(rounds):
                for name in SETS if r % 2 == 0 else SETS[::-1]:
                    fresh = [str(uuid.uuid4()) for _ in range(per_round)]
                    posting = post(http, fresh, inputs[name], c, end)
                    accepts[name].append(await measured(posting, gateway, db))
                    ids[name].update((invocation_id, n) for n, invocation_id in enumerate(fresh))
            launch.worker(APP, 1, sizes.worker_threads)
            for name in SETS:  # until every one has finished (which also warms both sets' reads)
                while not set(seen := await statuses(http, ids[name], c)) <= TERMINAL:
                    if time.perf_counter() > end:
                        raise TimeoutError(f"the {name} set did not finish in time: {dict(seen)}")
                    await asyncio.sleep(0.2)
            for r in range(rounds):
                for name in SETS if r % 2 == 0 else SETS[::-1]:
                    reads[name].append(await measured(sweep(http, ids[name], c), gateway, db))
    size = len(json.dumps(inputs["conversation"])) / 1024
    label = f"invocations whose input is {sizes.large_input_messages} messages ({size:.0f} KB)"
    return [
        *rows("accept", accepts, per_round, c, label),
        *rows("status read", reads, per_round * rounds, c, label),
    ]


def rows(what: str, phases: dict[str, list[Phase]], n: int, c: int, label: str) -> list[Row]:
    """Per ``what`` (``n`` of them a phase): gateway CPU, PostgreSQL CPU, the rate."""

    def per_set(of: str, per_one: Callable[[float], float]) -> dict[str, float]:
        """Each set's median of the phases' ``of``, as a figure per ``what``."""
        return {
            name: per_one(statistics.median(getattr(p, of) for p in phases[name])) for name in SETS
        }

    figures: list[tuple[str, str, Literal["higher", "lower"], dict[str, float]]] = [
        (
            f"gateway CPU µs per {what}",
            "µs",
            "lower",
            per_set("gateway_cpu", lambda s: s * 1e6 / n),
        ),
        (
            f"PostgreSQL CPU µs per {what}",
            "µs",
            "lower",
            per_set("postgres_cpu", lambda s: s * 1e6 / n),
        ),
        (f"{what}s/s at c={c}", "/s", "higher", per_set("seconds", lambda s: n / s)),
    ]
    details = {name: [p.__dict__ for p in phases[name]] for name in SETS}
    return [
        Row(
            scenario="largeinputs",
            figure=f"{figure}, {n:,} a round, {label}",
            value=values["conversation"],
            unit=unit,
            better=better,
            baseline=values["empty"],
            baseline_label="the same, input {}",
            details=details if k == 0 else {},
        )
        for k, (figure, unit, better, values) in enumerate(figures)
    ]
