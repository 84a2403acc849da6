"""Lending: a worker's reserved slots lent to the tokens' claim about to run (what it does since
2026-12-06), against a claim of their own beside it (what it did), on PostgreSQL, in this
process, in the same run.

Under a burst from many owners every tenant starts with nothing running, and announcements
came while the unreserved slots were held: a worker made a tokens' claim of ~32 and, beside it,
a reserved slots' claim for the announced tenants that started a few more (counted in a
distributed burst of 2,000 from 256 owners: 53 tokens' claims, 50 reserved slots' claims of ~6.5
each). Now the tokens' claim starts those too, in its own transaction (``claim_next(count,
reserved=...)``).

The list names ``lending_listed`` tenants, each with queued work and nothing running. A round
starts ``lending_count`` invocations for tokens and ``lending_reserved`` more, each of a tenant
with nothing running, and finishes them: lent, one claim of both; beside, a tokens' claim, then
a reserved slots' claim among as many tenants the first left out (those an announcement would
name). Rounds alternate between the two ways on one private database and one store of one
connection. Figures, per invocation started: this process's CPU (the reads, the allocations,
the statements: the worker's side) and the wall time (PostgreSQL's work included).
"""

from __future__ import annotations

import statistics
import time

from bench.report import Row
from bench.scenarios.alternating import Way, alternate, finish, queued_store
from bench.scenarios.common import Sizes
from tether.store.schema import Claim
from tether.store.store import Store

WORKER = "bench-lending"


async def claim(
    store: Store, way: Way, count: int, reserved: int, listed: list[str]
) -> list[Claim]:
    if way.ours:
        return await store.claim_next(count, WORKER, reserved=reserved)
    claims = await store.claim_next(count, WORKER)
    started = {c.tenant for c in claims}
    listed[:] = listed[reserved:] + listed[:reserved]  # the next round names the next tenants
    among = [t for t in listed if t not in started][:reserved]
    return claims + await store.claim_next(reserved, WORKER, newcomers=True, among=among)


async def one_round(store: Store, way: Way, count: int, reserved: int, listed: list[str]) -> None:
    cpu, wall = time.process_time(), time.perf_counter()
    claims = await claim(store, way, count, reserved, listed)
    spent_cpu, spent_wall = time.process_time() - cpu, time.perf_counter() - wall
    if len(claims) != count + reserved:
        raise RuntimeError(f"a round started {len(claims)} of {count + reserved}")
    way.cpu.append(spent_cpu / len(claims))
    way.wall.append(spent_wall / len(claims))
    await finish(store, claims)


async def run(sizes: Sizes) -> list[Row]:
    count, reserved = sizes.lending_count, sizes.lending_reserved
    listed, rounds = sizes.lending_listed, sizes.lending_rounds
    tenants = [f"listed-{i:03d}" for i in range(listed)]
    async with queued_store(tenants) as store:
        store.announced(tenants)
        lent, beside = await alternate(
            lambda way: one_round(store, way, count, reserved, tenants), rounds
        )
    details = {"listed": listed, "count": count, "reserved": reserved, "rounds": rounds}
    started = f"{count} + {reserved}"

    def row(figure: str, ours: list[float], theirs: list[float]) -> Row:
        value, baseline = statistics.median(ours) * 1e6, statistics.median(theirs) * 1e6
        label = f"a reserved slots' claim beside ({listed} tenants listed)"
        return Row("lending", figure, value, "µs", "lower", baseline, label, details=details)

    return [
        row(f"client CPU µs per invocation, claims of {started} (median)", lent.cpu, beside.cpu),
        row(f"µs per invocation, claims of {started} (median)", lent.wall, beside.wall),
    ]
