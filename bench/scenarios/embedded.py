"""Embedded: the embedded store's side of a no-op's life, in this process, on the file and in the
batches ``tether dev`` has (2,048-byte pages; group commits that gather, so batches of ~30),
against SQLite's default page size and against the batches of ~13 it had before the flushes
gathered (docs/performance.md, "What bounds the two that are not met").

A round is ``embedded_batch`` invocations through the store calls of their lives, each call for
the whole batch (``bench.scenarios.statements.one_round``: accept, claim, an event, finish, a
status read). Rounds alternate between two stores on two SQLite files, each warmed first:

- pages: a file the store created (2,048-byte pages) against one created with 4,096-byte pages,
  rounds of ``embedded_batch``; CPU per invocation, and the WAL each invocation writes (the
  WAL's growth over :data:`WAL_ROUNDS` rounds right after it was emptied: too few for the WAL to
  pass the frames at which it starts over, so every frame written grows it);
- batches: the store's file, rounds of ``embedded_batch`` against rounds of
  ``embedded_small_batch``; CPU per invocation.

This process's CPU includes SQLite's own work and the WAL checkpoints' thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import Row
from bench.scenarios.common import Sizes
from bench.scenarios.statements import one_round
from tether.store.store import Store

WARM_ROUNDS = 20
WAL_ROUNDS = 10
DEFAULT_PAGE = 4096


@dataclass
class Side:
    store: Store
    path: Path
    batch: int
    cpu: list[float] = field(default_factory=list)
    wal_kb: float = float("nan")

    async def round(self) -> None:
        started = time.process_time()
        await one_round(self.store, self.batch)
        self.cpu.append((time.process_time() - started) / self.batch)

    async def measure_wal(self) -> None:
        """KB of WAL per invocation over :data:`WAL_ROUNDS` rounds, from an empty WAL."""
        wal = self.path.with_name(self.path.name + "-wal")
        # The truncation is busy while the store's checkpoint thread works; a WAL left long
        # would be written over, not grown (a full run once measured 0 KB so): try again.
        for _ in range(100):
            with contextlib.closing(sqlite3.connect(self.path)) as conn:
                [(busy, _, _)] = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            if not busy and wal.stat().st_size == 0:
                break
            await asyncio.sleep(0.02)
        else:
            return  # the WAL could not be emptied: no figure (NaN), rather than a wrong one
        before = wal.stat().st_size
        for _ in range(WAL_ROUNDS):
            await one_round(self.store, self.batch)
        self.wal_kb = (wal.stat().st_size - before) / (WAL_ROUNDS * self.batch) / 1024

    @property
    def cpu_ms(self) -> float:
        return statistics.median(self.cpu) * 1000


def created_with_page(path: Path, page_size: int) -> None:
    """A new SQLite file in WAL mode with ``page_size``-byte pages, before the store opens it."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA page_size={page_size}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE bench_page_probe (x)")
        conn.execute("DROP TABLE bench_page_probe")


def page_size(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


@contextlib.asynccontextmanager
async def opened(path: Path) -> AsyncIterator[Store]:
    store = Store.embedded(str(path))
    try:
        await store.migrate()
        yield store
    finally:
        await store.close()


async def alternate(sides: tuple[Side, Side], rounds: int) -> None:
    for side in sides:
        for _ in range(WARM_ROUNDS):
            await one_round(side.store, side.batch)
    for _ in range(rounds):
        for side in sides:
            await side.round()


async def run(sizes: Sizes) -> list[Row]:
    batch, small, rounds = sizes.embedded_batch, sizes.embedded_small_batch, sizes.embedded_rounds
    with tempfile.TemporaryDirectory(prefix="tether-bench-embedded-") as folder:
        ours_file, default_file = Path(folder, "store.db"), Path(folder, "default.db")
        created_with_page(default_file, DEFAULT_PAGE)
        async with opened(ours_file) as ours, opened(default_file) as theirs:
            pages = (
                Side(ours, ours_file, batch),
                Side(theirs, default_file, batch),
            )
            await alternate(pages, rounds)
            for side in pages:
                await side.measure_wal()
        ours_page, theirs_page = page_size(ours_file), page_size(default_file)
        batches_file = Path(folder, "batches.db")
        async with opened(batches_file) as store:
            batches = (
                Side(store, batches_file, batch),
                Side(store, batches_file, small),
            )
            await alternate(batches, rounds)
    details = {"batch": batch, "small_batch": small, "rounds": rounds, "wal_rounds": WAL_ROUNDS}
    store_side, default_side = pages
    large, small_side = batches
    default_label = f"{theirs_page:,}-byte pages, SQLite's default"

    def lower(figure: str, unit: str, value: float, baseline: float, label: str) -> Row:
        return Row("embedded", figure, value, unit, "lower", baseline, label, details=details)

    return [
        lower(
            f"CPU ms per invocation, {ours_page:,}-byte pages, rounds of {batch} (median)",
            "ms",
            store_side.cpu_ms,
            default_side.cpu_ms,
            default_label,
        ),
        lower(
            f"WAL KB per invocation, {ours_page:,}-byte pages",
            "KB",
            store_side.wal_kb,
            default_side.wal_kb,
            default_label,
        ),
        lower(
            f"CPU ms per invocation, rounds of {batch} (median)",
            "ms",
            large.cpu_ms,
            small_side.cpu_ms,
            f"rounds of {small}: batches before the flushes gathered",
        ),
    ]
