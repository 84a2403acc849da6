"""Statements: the store's side of a no-op's life on PostgreSQL, in this process, with statements
run on psycopg directly (``tether.store.plans`` on psycopg, what the store does) against the same
statements through SQLAlchemy's asyncio layer (what it did until 2026-12-05), in the same run.

A round is ``statements_batch`` invocations through the store calls a gateway and a worker make
for them, each call for the whole batch as the group commits make it: ``accept_many``,
``claim_next``, ``append_many`` (one event each), ``finish_many``, then ``get_many`` (the status
reads). Rounds alternate between the two ways, ``statements_rounds`` each, on one private
database and one store of one connection. Figures: this process's CPU per invocation (the
client side of the statements: what a gateway and a worker spend on them) and the wall time
per round (PostgreSQL's own work included, the same both ways).
"""

from __future__ import annotations

import contextlib
import statistics
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from unittest import mock

from bench.procs import private_database
from bench.report import Row
from bench.scenarios.common import Sizes
from tether.outcomes import completed
from tether.store import plans
from tether.store.schema import NewInvocation
from tether.store.store import AppendRequest, FinishRequest, NewEvent, Store

WORKER = "bench-statements"


@dataclass
class Way:
    label: str
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)

    @contextlib.contextmanager
    def chosen(self) -> Iterator[None]:
        if self.label == "direct":
            yield
            return
        with mock.patch.object(plans, "plan_for", return_value=None):
            yield


async def one_round(store: Store, batch: int) -> None:
    news = [NewInvocation(str(uuid.uuid4()), f"bench-{i % 8}", None, {}, "h") for i in range(batch)]
    await store.accept_many(news)
    claims = await store.claim_next(batch, WORKER, [n.id for n in news])
    appends = [AppendRequest(c.invocation_id, c.attempt, [NewEvent("tick", {})]) for c in claims]
    await store.append_many(appends)
    await store.finish_many(
        [FinishRequest(c.invocation_id, c.attempt, completed(None)) for c in claims]
    )
    found = await store.get_many([n.id for n in news])
    if len(claims) != batch or any(f is None or f.status.value != "completed" for f in found):
        raise RuntimeError(f"a round finished {len(claims)} of {batch} invocations")


async def run(sizes: Sizes) -> list[Row]:
    ways = [Way("direct"), Way("sqlalchemy")]
    batch = sizes.statements_batch
    with private_database() as db:
        store = Store.postgres(db.sqlalchemy_url, pool_size=1, separate_reads=False)
        try:
            for way in ways:  # warm: compiled, planned, prepared by psycopg (after 5 runs)
                with way.chosen():
                    for _ in range(8):
                        await one_round(store, batch)
            for _ in range(sizes.statements_rounds):
                for way in ways:
                    with way.chosen():
                        cpu, wall = time.process_time(), time.perf_counter()
                        await one_round(store, batch)
                        way.cpu.append(time.process_time() - cpu)
                        way.wall.append(time.perf_counter() - wall)
        finally:
            await store.close()
    direct, through = ways
    details = {"batch": batch, "rounds": sizes.statements_rounds}
    label = "every statement through SQLAlchemy's asyncio layer"
    return [
        Row(
            scenario="statements",
            figure=f"client CPU ms per invocation, rounds of {batch} (median)",
            value=statistics.median(direct.cpu) / batch * 1000,
            unit="ms",
            better="lower",
            baseline=statistics.median(through.cpu) / batch * 1000,
            baseline_label=label,
            details=details,
        ),
        Row(
            scenario="statements",
            figure=f"ms per round of {batch} (median)",
            value=statistics.median(direct.wall) * 1000,
            unit="ms",
            better="lower",
            baseline=statistics.median(through.wall) * 1000,
            baseline_label=label,
            details=details,
        ),
    ]
