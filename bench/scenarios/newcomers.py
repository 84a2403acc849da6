"""Newcomers: the claim a worker makes for the tenants a gateway announced, when only its
reserved slots are free (``worker.reserve``), on PostgreSQL, in this process: reading the
announced tenants alone (``among``, what it does) against reading this process's whole tenant
list (what it did until 2026-12-06), in the same run.

The list names ``newcomers_listed`` tenants, each with queued work and nothing running, as under
a burst from many owners (the peer's client cycles through 256). A round accepts one invocation
for each of ``newcomers_batch`` other tenants, announces them, claims ``newcomers_batch`` slots
for tenants with nothing running and finishes what it started (so every tenant has nothing
running again). Rounds alternate between the two ways on one private database and one store of
one connection. Figures: this process's CPU per claim (the worker's side: the read, the
allocation, the statements) and the wall time per claim (PostgreSQL's work included).
"""

from __future__ import annotations

import itertools
import statistics
import time
import uuid

from bench.report import Row
from bench.scenarios.alternating import Way, alternate, finish, queued_store
from bench.scenarios.common import Sizes
from tether.store.schema import NewInvocation
from tether.store.store import Store

WORKER = "bench-newcomers"


async def one_round(store: Store, way: Way, batch: int, k: int) -> None:
    tenants = [f"newcomer-{k}-{i}" for i in range(batch)]
    await store.accept_many(
        [NewInvocation(str(uuid.uuid4()), t, None, {}, "h", tenant=t) for t in tenants]
    )
    store.announced(tenants)
    cpu, wall = time.process_time(), time.perf_counter()
    claims = await store.claim_next(
        batch, WORKER, newcomers=True, among=sorted(tenants) if way.ours else None
    )
    way.cpu.append(time.process_time() - cpu)
    way.wall.append(time.perf_counter() - wall)
    if len(claims) != batch:
        raise RuntimeError(f"a newcomers' claim started {len(claims)} of {batch}")
    await finish(store, claims)


async def run(sizes: Sizes) -> list[Row]:
    listed, batch, rounds = sizes.newcomers_listed, sizes.newcomers_batch, sizes.newcomers_rounds
    background = [f"listed-{i}" for i in range(listed)]
    async with queued_store(background) as store:
        await store.claim_next(1, WORKER)  # a scan: the list names them all from now on
        store.announced(background)
        k = itertools.count()
        among, whole = await alternate(lambda way: one_round(store, way, batch, next(k)), rounds)
    details = {"listed": listed, "batch": batch, "rounds": rounds}

    def row(figure: str, ours: list[float], theirs: list[float]) -> Row:
        value, baseline = statistics.median(ours) * 1000, statistics.median(theirs) * 1000
        label = f"the whole list read ({listed} tenants listed)"
        return Row("newcomers", figure, value, "ms", "lower", baseline, label, details=details)

    return [
        row(f"client CPU ms per newcomers' claim of {batch} (median)", among.cpu, whole.cpu),
        row(f"ms per newcomers' claim of {batch} (median)", among.wall, whole.wall),
    ]
