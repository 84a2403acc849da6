"""The peer, side by side: each Tether mode and its AgentKit counterpart up at once, the same
burst sent to each in turn, the order alternating (A B, then B A), ``sidebyside_rounds`` rounds.

``peer`` runs its four servers one after another, so one server's turn can fall in a slow minute
of a shared machine (AgentKit's memory store accepted 1,510–2,673/s from one run to the next in
one session). Here a slow minute slows both servers of a round. Per server, each figure is the
median over the rounds; the details keep every round and the median of the per-round ratios.

Figures, per pair (``tether-dev`` against ``agentkit-memory``, ``tether-distributed`` against
``agentkit-postgres``): background accepts/s (``peer_posts`` POSTs at ``concurrency``), seconds
until the client has read every one terminal, and the server's CPU per invocation over the burst
(its processes; PostgreSQL's backends not counted, on either side).

Both servers of a pair keep their tables in one database. Before each burst, when the machine's
PostgreSQL runs without autovacuum, the scenario runs ``VACUUM ANALYZE`` on it, as autovacuum
would have by then (``Database.vacuum_if_no_autovacuum``).

Skipped, with a message, when AgentKit is not installed (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Literal

from bench.peer_load import burst
from bench.procs import Proc, launcher, private_database
from bench.report import Row
from bench.scenarios.common import Sizes
from bench.scenarios.peer import PAIRS, agentkit_missing, serving

FIGURES = ("accepted_per_s", "terminal_s", "cpu_ms")


@dataclass
class Round:
    accepted_per_s: float
    terminal_s: float
    cpu_ms: float
    """Server CPU per invocation over the burst, ms."""
    cpu_ms_each: tuple[float, ...] = ()
    """The same, per process, in the order the processes were given."""

    def __str__(self) -> str:
        return (
            f"{self.accepted_per_s:,.0f} accepts/s, {self.terminal_s:.2f} s until terminal, "
            f"{self.cpu_ms:.3f} ms CPU per invocation"
        )


async def one_burst(procs: list[Proc], base: str, sizes: Sizes) -> Round:
    before = [p.cpu_seconds() for p in procs]
    b = await burst(base, sizes.peer_posts, sizes.concurrency, sizes.deadline)
    await asyncio.sleep(0.3)  # what the burst's last invocations still cost
    each = tuple(
        (p.cpu_seconds() - cpu) * 1000 / sizes.peer_posts
        for p, cpu in zip(procs, before, strict=True)
    )
    return Round(b.accepted_per_s, b.terminal_s, sum(each), each)


async def pair(ours: str, theirs: str, sizes: Sizes) -> dict[str, list[Round]]:
    rounds: dict[str, list[Round]] = {ours: [], theirs: []}
    with private_database() as db, launcher(db) as launch, ExitStack() as up:
        servers = {name: up.enter_context(serving(launch, name)) for name in (ours, theirs)}
        for _, base in servers.values():
            await burst(base, sizes.peer_warmup, sizes.concurrency, sizes.deadline)
        for n in range(sizes.sidebyside_rounds):
            order = (ours, theirs) if n % 2 == 0 else (theirs, ours)
            for name in order:
                await asyncio.to_thread(db.vacuum_if_no_autovacuum)  # both servers' tables
                await asyncio.sleep(1.0)  # the other server's burst has settled
                rounds[name].append(await one_burst(*servers[name], sizes))
            print(
                f"[bench] sidebyside: round {n + 1}: "
                + ", ".join(f"{name} {rounds[name][-1]}" for name in order),
                file=sys.stderr,
                flush=True,
            )
    return rounds


def rows_for(ours: str, theirs: str, rounds: dict[str, list[Round]], sizes: Sizes) -> list[Row]:
    n, c, k = sizes.peer_posts, sizes.concurrency, sizes.sidebyside_rounds
    labels: dict[str, tuple[str, str, Literal["higher", "lower"]]] = {
        "accepted_per_s": (f"background accepts/s, {n:,} at c={c}", "/s", "higher"),
        "terminal_s": (f"s until all {n:,} terminal (client reads)", "s", "lower"),
        "cpu_ms": ("server CPU ms per invocation in the burst", "ms", "lower"),
    }
    rows = []
    for figure in FIGURES:
        label, unit, better = labels[figure]
        mine = [getattr(r, figure) for r in rounds[ours]]
        peer = [getattr(r, figure) for r in rounds[theirs]]
        ratios = [a / b for a, b in zip(mine, peer, strict=True) if b]
        rows.append(
            Row(
                scenario="sidebyside",
                figure=f"{ours}: {label}, median of {k} rounds",
                value=statistics.median(mine),
                unit=unit,
                better=better,
                baseline=statistics.median(peer),
                baseline_label=f"{theirs}, side by side",
                details={
                    "rounds": {ours: mine, theirs: peer},
                    "median_round_ratio": statistics.median(ratios) if ratios else None,
                },
            )
        )
    return rows


async def run(sizes: Sizes) -> list[Row]:
    if agentkit_missing("sidebyside"):
        return []
    rows: list[Row] = []
    for ours, theirs in reversed(PAIRS):  # the embedded pair first: it takes a minute
        print(f"[bench] sidebyside: {ours} beside {theirs} ...", file=sys.stderr, flush=True)
        rows += rows_for(ours, theirs, await pair(ours, theirs, sizes), sizes)
    return rows
