"""What a large input costs: two sets of background no-ops on 1 gateway + 1 worker process, one
posted with a conversation as its input (``large_input_messages`` messages of ~300 characters,
67 kB of JSON), one with ``{}``; each figure of the first set beside the second's.

1. **Accepts**, with no worker running yet: after ``2 * concurrency`` posts of each set (not
   measured: the gateway's pool and plans warm), ``large_input_rounds`` rounds, each posting
   ``large_input_posts / rounds`` fresh ids of the conversation set and four times as many of
   the ``{}`` set (its accepts are ~8x cheaper: its phases would be a few clock ticks long),
   at ``concurrency`` (the peer's client), the sets alternating.
2. **Status reads**: the worker started, every invocation finished, the worker stopped (its
   idle polling is no read's cost); every status of a set read in sweeps at ``concurrency``
   (``GET /api/invocations/{id}``), the sets alternating for ``large_input_rounds`` sweeps each.

Per accept and per read: the gateway's CPU, PostgreSQL's backends' CPU, and the rate (medians
of the rounds; CPU counts in 10-ms ticks). No answer shows an input, so a read need not fetch
one: since the thirty-fourth session none does (before, a read of the conversation set cost the
gateway ~2.6x the CPU of the ``{}`` set's), and an accept encodes it once for the insert. The
conversation's text is ASCII, so it takes ``dumps``' fast path (no surrogate search); text with
other characters would not.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench.peer_load import TERMINAL, post_all, read_statuses
from bench.procs import Database, Proc, cpu_seconds, launcher, private_database
from bench.raw_http import Requests, request_client
from bench.report import Row
from bench.scenarios.common import Sizes
from tether.jsonvalue import dumps

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
    process_cpu: float  # the measured process's: the gateway's here, the worker's in largeoutputs
    postgres_cpu: float
    backends_changed: int  # connected before or after the phase, not both


def backends_cpu(db: Database, skip: frozenset[int]) -> dict[int, float]:
    """The CPU seconds of each backend connected to ``db`` whose process could be read, but
    those of ``skip`` (the bench's own)."""
    pids = db.backend_pids() - skip
    return {pid: cpu_seconds(pid) for pid in pids if Path(f"/proc/{pid}").exists()}


async def measured(
    work: Awaitable[object], proc: Proc, db: Database, skip: frozenset[int] = frozenset()
) -> Phase:
    """``work``'s seconds and CPU: ``proc``'s, and that of the backends connected before and
    after it, but ``skip`` (one that came or went meanwhile would count its whole life, or none
    of it: how many did is kept, and the warm-up before the rounds opens the pools)."""
    proc0, backends0 = proc.cpu_seconds(), backends_cpu(db, skip)
    started = time.perf_counter()
    await work
    seconds = time.perf_counter() - started
    backends1 = backends_cpu(db, skip)
    postgres = sum(backends1[pid] - cpu for pid, cpu in backends0.items() if pid in backends1)
    churn = len(backends0.keys() ^ backends1.keys())
    return Phase(seconds, proc.cpu_seconds() - proc0, postgres, churn)


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
    # the {} set's accepts are ~8x cheaper: 4x as many a round keep its phases measurable
    posts = {"conversation": sizes.large_input_posts // rounds}
    posts["empty"] = posts["conversation"] * 4
    inputs = {"conversation": conversation(sizes.large_input_messages), "empty": {}}
    ids: dict[str, dict[str, int]] = {name: {} for name in SETS}
    accepts: dict[str, list[Phase]] = {name: [] for name in SETS}
    reads: dict[str, list[Phase]] = {name: [] for name in SETS}
    with private_database() as db, launcher(db) as launch:
        gateway, base = launch.gateway(APP, 1)
        end = time.perf_counter() + sizes.deadline

        async def post_some(name: str, count: int) -> None:
            fresh = [str(uuid.uuid4()) for _ in range(count)]
            await post(http, fresh, inputs[name], c, end)
            ids[name].update((invocation_id, n) for n, invocation_id in enumerate(fresh))

        async with request_client(base, c) as http:  # its connections made before any round
            for name in SETS:  # not measured: the gateway's pool and plans warm
                await post_some(name, 2 * c)
            for r in range(rounds):
                for name in SETS if r % 2 == 0 else SETS[::-1]:
                    accepts[name].append(await measured(post_some(name, posts[name]), gateway, db))
            worker = launch.worker(APP, 1, sizes.worker_threads)
            for name in SETS:  # until every one has finished (which also warms both sets' reads)
                while not set(seen := await statuses(http, ids[name], c)) <= TERMINAL:
                    if time.perf_counter() > end:
                        raise TimeoutError(f"the {name} set did not finish in time: {dict(seen)}")
                    await asyncio.sleep(0.2)
            launch.stop(worker)  # its idle polling is no read's cost
            for r in range(rounds):
                for name in SETS if r % 2 == 0 else SETS[::-1]:
                    reads[name].append(await measured(sweep(http, ids[name], c), gateway, db))
    read_n = {name: len(ids[name]) for name in SETS}
    size = len(dumps(inputs["conversation"]).encode()) / 1000
    label = f"input {sizes.large_input_messages} messages ({size:.0f} kB) against {{}}"
    return [
        *rows("largeinputs", "gateway", "accept", accepts, posts, c, label),
        *rows("largeinputs", "gateway", "status read", reads, read_n, c, label),
    ]


def rows(
    scenario: str,
    process: str,
    what: str,
    phases: dict[str, list[Phase]],
    n: dict[str, int],
    c: int,
    label: str,
) -> list[Row]:
    """Per ``what`` (``n[set]`` of them a phase): ``process``'s CPU, PostgreSQL's, the rate."""

    def per_set(of: str, per_one: Callable[[float, int], float]) -> dict[str, float]:
        """Each set's median of the phases' ``of``, as a figure per ``what``."""
        return {
            name: per_one(statistics.median(getattr(p, of) for p in phases[name]), n[name])
            for name in SETS
        }

    figures: list[tuple[str, str, Literal["higher", "lower"], dict[str, float]]] = [
        (
            f"{process} CPU µs per {what}",
            "µs",
            "lower",
            per_set("process_cpu", lambda s, k: s * 1e6 / k),
        ),
        (
            f"PostgreSQL CPU µs per {what}",
            "µs",
            "lower",
            per_set("postgres_cpu", lambda s, k: s * 1e6 / k),
        ),
        (f"{what}s/s at c={c}", "/s", "higher", per_set("seconds", lambda s, k: k / s)),
    ]
    details = {"count_a_phase": n, **{name: [p.__dict__ for p in phases[name]] for name in SETS}}
    return [
        Row(
            scenario=scenario,
            figure=f"{figure}, {label}",
            value=values["conversation"],
            unit=unit,
            better=better,
            baseline=values["empty"],
            baseline_label="the same, with {}",
            details=details if k == 0 else {},
        )
        for k, (figure, unit, better, values) in enumerate(figures)
    ]
