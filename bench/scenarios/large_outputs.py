"""What a large output costs the worker: two sets of background runs on 1 gateway + 1 worker
process running ``bench.apps:echo`` (each run returns its input), one posted with
``largeinputs``' conversation (67 kB of JSON), one with ``{}``; each figure of the first set
beside the second's.

After ``2 * concurrency`` runs of each set (not measured: pools, plans and the worker's slots
warm), ``large_input_rounds`` rounds, each posting ``large_input_posts / rounds`` fresh ids of
the conversation set and four times as many of the ``{}`` set at ``concurrency``, the sets
alternating; a phase lasts from its first post until PostgreSQL counts every run of it
completed. Per run: the worker's CPU (the claim decodes the input, the run checks and encodes
the output, the finish stores it in the row and in the terminal event), PostgreSQL's backends'
CPU (the accept's insert included: the gateway posts while the worker runs; the bench's own
connection, which counts the completed runs every 20 ms, left out), and runs a second
from post to finish; medians of the rounds, CPU in 10-ms ticks. The worker's idle polling
between runs counts too (a few ms a second).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from bench.procs import launcher, private_database
from bench.raw_http import Requests, request_client
from bench.report import Row
from bench.scenarios.common import Pg, Sizes
from bench.scenarios.large_inputs import SETS, Phase, conversation, measured, post, rows
from tether.jsonvalue import dumps

APP = "bench.apps:echo"


async def post_and_finish(
    http: Requests, pg: Pg, input: Any, count: int, c: int, end: float
) -> None:
    """Post ``count`` runs of ``input`` and wait until PostgreSQL counts them completed."""
    done = pg.count("completed") + count
    await post(http, [str(uuid.uuid4()) for _ in range(count)], input, c, end)
    while pg.count("completed") < done:
        if time.perf_counter() > end:
            raise TimeoutError(f"{done - pg.count('completed')} runs of {count} not completed")
        await asyncio.sleep(0.02)


async def run(sizes: Sizes) -> list[Row]:
    c, rounds = sizes.concurrency, sizes.large_input_rounds
    posts = {"conversation": sizes.large_input_posts // rounds}
    posts["empty"] = posts["conversation"] * 4  # as in largeinputs: phases of a similar length
    inputs = {"conversation": conversation(sizes.large_input_messages), "empty": {}}
    phases: dict[str, list[Phase]] = {name: [] for name in SETS}
    with private_database() as db, launcher(db) as launch:
        pg = Pg(db)
        try:
            worker = launch.worker(APP, 1, sizes.worker_threads)
            _, base = launch.gateway(APP, 1)
            end = time.perf_counter() + sizes.deadline
            polling = frozenset({pg.conn.info.backend_pid})  # counting completed runs: not theirs
            async with request_client(base, c) as http:
                for name in SETS:  # not measured: warm-up
                    await post_and_finish(http, pg, inputs[name], 2 * c, c, end)
                for r in range(rounds):
                    for name in SETS if r % 2 == 0 else SETS[::-1]:
                        work = post_and_finish(http, pg, inputs[name], posts[name], c, end)
                        phases[name].append(await measured(work, worker, db, polling))
            if pg.count("failed"):
                raise RuntimeError(f"{pg.count('failed')} runs failed")
        finally:
            pg.close()
    size = len(dumps(inputs["conversation"]).encode()) / 1000
    label = f"output {sizes.large_input_messages} messages ({size:.0f} kB) against {{}}"
    return rows("largeoutputs", "worker", "run", phases, posts, c, label)
