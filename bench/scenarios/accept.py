"""Background accept: invocations/s that ``POST /api/invocations`` (background) answers 202,
against a bare aiohttp handler doing one PostgreSQL insert and one Redis enqueue.

No worker runs: this is the gateway alone. Both servers run side by side (only one is loaded at
a time) with the same warm-up, client, process count and private database; each figure is the
median of ``accept_rounds`` rounds of ``accept_posts`` posts, alternating baseline and Tether.
"""

from __future__ import annotations

import statistics

from bench.load import post_background
from bench.procs import launcher, private_database
from bench.report import Row
from bench.scenarios.common import Sizes

APP = "bench.apps:noop"


async def rate(base: str, sizes: Sizes) -> float:
    poster = await post_background(base, sizes.accept_posts, sizes.concurrency)
    return poster.posted / poster.elapsed


async def run(sizes: Sizes) -> list[Row]:
    rows = []
    with private_database() as db:
        for processes in sizes.process_counts:
            with launcher(db) as bare, launcher(db) as ours:
                _, bare_base = bare.bare_gateway(processes)
                _, our_base = ours.gateway(APP, processes)
                for base in (bare_base, our_base):
                    await post_background(base, sizes.accept_warmup, sizes.concurrency)
                baselines, values = [], []
                for _ in range(sizes.accept_rounds):  # alternating, so noise hits both alike
                    baselines.append(await rate(bare_base, sizes))
                    values.append(await rate(our_base, sizes))
            baseline, value = statistics.median(baselines), statistics.median(values)
            floor = 1500 if processes == 2 else 0
            met = value >= 0.8 * baseline and value >= floor
            rows.append(
                Row(
                    scenario="accept",
                    figure=f"accepted/s, {processes} gateway proc, c={sizes.concurrency}",
                    value=value,
                    unit="/s",
                    better="higher",
                    baseline=baseline,
                    baseline_label="bare insert+enqueue",
                    target=(">= 1500/s and >= 80%" if floor else ">= 80%"),
                    met=met,
                    details={
                        "posts": sizes.accept_posts,
                        "processes": processes,
                        "rounds": values,
                        "baseline_rounds": baselines,
                    },
                )
            )
    return rows
