"""Background accept: invocations/s that ``POST /api/invocations`` (background) answers 202,
against a bare aiohttp handler doing one PostgreSQL insert and one Redis enqueue.

No worker runs: this is the gateway alone. Both servers get the same warm-up, the same client,
the same process count and the same private database.
"""

from __future__ import annotations

from bench.load import post_background
from bench.procs import launcher, private_database
from bench.report import Row
from bench.scenarios.common import Sizes

APP = "bench.apps:noop"


async def rate(base: str, sizes: Sizes) -> float:
    await post_background(base, sizes.accept_warmup, sizes.concurrency)
    poster = await post_background(base, sizes.accept_posts, sizes.concurrency)
    return poster.posted / poster.elapsed


async def run(sizes: Sizes) -> list[Row]:
    rows = []
    with private_database() as db:
        for processes in sizes.process_counts:
            with launcher(db) as launch:
                _, base = launch.bare_gateway(processes)
                baseline = await rate(base, sizes)
            with launcher(db) as launch:
                _, base = launch.gateway(APP, processes)
                value = await rate(base, sizes)
            floor = 1500 if processes == 2 else 0
            met = value >= 0.8 * baseline and value >= floor
            rows.append(Row(
                scenario="accept",
                figure=f"accepted/s, {processes} gateway proc, c={sizes.concurrency}",
                value=value, unit="/s", better="higher",
                baseline=baseline, baseline_label="bare insert+enqueue",
                target=(">= 1500/s and >= 80%" if floor else ">= 80%"),
                met=met,
                details={"posts": sizes.accept_posts, "processes": processes},
            ))
    return rows
