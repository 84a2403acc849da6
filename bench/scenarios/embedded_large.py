"""Embedded, large values: what ``tether dev``'s store spends on a 67 kB input and output, in this
process, as the JSON values travel in its batches (``tether.store.bound``) on this SQLite (3.38
and newer: as JSON, taken out with ``->``) against how they travel on an older one (a string
holding each value's text, escaped again inside the batch's and read twice by SQLite).

A round is ``embedded_large_batch`` invocations through the store calls of their lives, each
call for the whole batch: ``accept_many`` of the conversation of ``largeinputs``
(``large_input_messages`` messages) as the gateway hands it (its canonical text encoded
already), ``claim_next``, ``finish_many`` with the same conversation as the output as the
runtime hands it (encoded already), then ``get_many`` and the terminal event's read. Rounds
alternate between two stores on two SQLite files, ``embedded_large_rounds`` each after
:data:`WARM_ROUNDS`; figures are this process's CPU per invocation, medians of the rounds (SQLite's
own work and the WAL checkpoints' thread included): the accept, the finish, and the round.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.report import Row
from bench.scenarios.common import Sizes
from bench.scenarios.embedded import opened
from bench.scenarios.large_inputs import conversation
from tether.jsonvalue import canonical, encoded, request_hash
from tether.outcomes import completed
from tether.store.dialect import SQLite, sqlite_before_arrows
from tether.store.schema import NewInvocation
from tether.store.store import FinishRequest, Store

WARM_ROUNDS = 5
WORKER = "bench-embedded-large"


@dataclass
class Side:
    store: Store
    calls: dict[str, list[float]] = field(
        default_factory=lambda: {"accept": [], "finish": [], "round": []}
    )

    async def round(self, value: Any, batch: int, measured: bool = True) -> None:
        text = canonical(value)
        news = [
            NewInvocation(
                str(uuid.uuid4()),
                f"bench-{n % 4}",
                None,
                value,
                request_hash(text, None, 0),
                input_text=text,
            )
            for n in range(batch)
        ]
        started = time.process_time()
        await self.store.accept_many(news)
        accepted = time.process_time()
        claims = await self.store.claim_next(batch, WORKER, [n.id for n in news])
        output = encoded(value)  # as the runtime's check leaves it
        finishing = time.process_time()
        await self.store.finish_many(
            [FinishRequest(c.invocation_id, c.attempt, completed(value, output)) for c in claims]
        )
        finished = time.process_time()
        found = await self.store.get_many([n.id for n in news])
        ends = [await self.store.events_after(n.id, 1) for n in news]
        ended = time.process_time()
        if len(claims) != batch or any(f is None or f.output != value for f in found):
            raise RuntimeError(f"a round finished {len(claims)} of {batch} invocations")
        if any(e[-1].data.get("output") != value for e in ends):
            raise RuntimeError("a terminal event lost its output")
        if measured:
            for name, seconds in (
                ("accept", accepted - started),
                ("finish", finished - finishing),
                ("round", ended - started),
            ):
                self.calls[name].append(seconds / batch)

    def ms(self, call: str) -> float:
        return statistics.median(self.calls[call]) * 1000


async def run(sizes: Sizes) -> list[Row]:
    batch, rounds = sizes.embedded_large_batch, sizes.embedded_large_rounds
    value = conversation(sizes.large_input_messages)
    size_kb = len(canonical(value)) / 1000
    carriage = SQLite.carriage.value
    with tempfile.TemporaryDirectory(prefix="tether-bench-embedded-large-") as folder:
        async with contextlib.AsyncExitStack() as stores:
            ours = await stores.enter_async_context(opened(Path(folder, "store.db")))
            with sqlite_before_arrows():  # the store takes its dialect as it opens
                theirs = await stores.enter_async_context(opened(Path(folder, "older.db")))
            sides = Side(ours), Side(theirs)
            for side in sides:
                for _ in range(WARM_ROUNDS):
                    await side.round(value, batch, measured=False)
            for _ in range(rounds):
                for side in sides:
                    await side.round(value, batch)
    store_side, older_side = sides
    details = {"batch": batch, "rounds": rounds, "value_kb": size_kb, "carriage": carriage}
    label = "values as strings of their text, as on SQLite before 3.38"
    figures = {
        "accept": "accept",
        "finish": "finish",
        "round": "accept, claim, finish, status and event read",
    }
    return [
        Row(
            "embeddedlarge",
            f"CPU ms per invocation, {what}, {size_kb:.0f} kB input and output ({carriage})",
            store_side.ms(call),
            "ms",
            "lower",
            older_side.ms(call),
            label,
            details=details,
        )
        for call, what in figures.items()
    ]
