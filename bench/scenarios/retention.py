"""Retention of chatty invocations: the reaper's passes (transactions of at most
``EXPIRED_INVOCATIONS`` invocations and ``EXPIRED_EVENTS`` events) against passes as they were
before the event bound (``EXPIRED_INVOCATIONS`` invocations a transaction whatever their events,
10 transactions a pass), in the same run, on the embedded store (a SQLite file, what
``tether dev`` uses) and on PostgreSQL.

Each side gets a fresh store holding ``chatty_invocations`` completed invocations of
``chatty_events`` events each, finished eight days ago (past the default retention), and one
running invocation that appends an event every ``chatty_tick`` s while the passes run back to
back until nothing has expired. Figures: the longest retention transaction (ms), the longest gap
between two appends' starts meanwhile (ms: on the embedded store a transaction holds the one
writer and the event loop it runs on), and seconds until all were deleted.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.procs import private_database
from bench.report import Row
from bench.scenarios.common import Sizes
from tether.liveness_keepalive import MAX_STALE_AFTER
from tether.outcomes import completed
from tether.pubsub import MemoryPubSub
from tether.queue import Queue
from tether.services import Services
from tether.settings import Settings
from tether.store.maintenance import EXPIRED_INVOCATIONS, Expired
from tether.store.schema import NewInvocation, invocations
from tether.store.store import AppendRequest, FinishRequest, NewEvent, Store
from tether.worker.local_queue import LocalQueue
from tether.worker.reaper import Reaper

RETENTION = 7 * 86400.0
OLD_PASS_BATCHES = 10
"""Transactions of one pass before the event bound (``DELETE_BATCHES_PER_PASS`` then)."""


@dataclass
class Side:
    transactions: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    seconds: float = 0.0
    events: int = 0


@asynccontextmanager
async def opened(kind: str) -> AsyncIterator[Store]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="tether-bench-retention-") as tmp:
            store = Store.embedded(str(Path(tmp) / "tether.db"))
            await store.migrate()
            try:
                yield store
            finally:
                await store.close()
    else:
        with private_database() as db:
            store = Store.postgres(db.sqlalchemy_url, pool_size=4)
            try:
                yield store
            finally:
                await store.close()


async def fill(store: Store, count: int, events: int) -> str:
    """``count`` completed invocations of ``events`` events, eight days old; a running one."""
    for _ in range(count):
        invocation_id = await started(store)
        ticks = [NewEvent("tick", {"i": i, "text": "x" * 40}) for i in range(events - 2)]
        for k in range(0, len(ticks), 5000):
            await store.append(AppendRequest(invocation_id, 1, ticks[k : k + 5000]))
        await store.finish(FinishRequest(invocation_id, 1, completed({"ok": True})))
    async with store.engine.begin() as conn:
        finished = invocations.c.finished_at
        await conn.execute(
            sa.update(invocations)
            .where(finished.is_not(None))
            .values(finished_at=finished - 8 * 86400)
        )
    return await started(store)


async def started(store: Store) -> str:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "bench", None, {}, "h"))
    await store.claim(invocation_id, "bench-worker")
    return invocation_id


def timed(store: Store, side: Side) -> Callable[..., Awaitable[Expired]]:
    delete_expired = store.delete_expired

    async def timed_delete(*args: Any) -> Expired:
        began = time.perf_counter()
        done = await delete_expired(*args)
        side.transactions.append(time.perf_counter() - began)
        side.events += done.events
        return done

    return timed_delete


async def reaper_passes(store: Store) -> None:
    """Today's reaper, its passes back to back (no interval between them); its queue has no
    runtime attached, so what it would re-send is dropped."""
    reaper = Reaper(
        services=Services(store, MemoryPubSub(), Queue(LocalQueue())),
        settings=Settings.model_validate(
            {"timers": {"count_audit": 0, "stale_after": MAX_STALE_AFTER}}  # nothing goes stale
        ),
        has_recover=True,
    )
    while (await reaper.reap_once()).deleted or await expired_left(store):
        pass


async def old_passes(store: Store) -> None:
    """The passes before the event bound: up to 10 transactions of 500 invocations each."""
    while True:
        for _ in range(OLD_PASS_BATCHES):
            done = await store.delete_expired(RETENTION, EXPIRED_INVOCATIONS, sys.maxsize)
            if done.invocations < EXPIRED_INVOCATIONS:
                break
        if not await expired_left(store):
            return


async def expired_left(store: Store) -> bool:
    async with store.engine.connect() as conn:
        old = invocations.c.finished_at < time.time() - RETENTION
        return bool(await conn.scalar(sa.select(sa.func.count()).where(old)))


async def appending(
    store: Store, invocation_id: str, tick: float, side: Side, stop: asyncio.Event
) -> None:
    """Append an event every ``tick`` s; record the gap since the previous append began (a stall
    of the loop or of the store shows as a long one)."""
    last = time.perf_counter()
    while not stop.is_set():
        began = time.perf_counter()
        side.gaps.append(began - last)
        last = began
        await store.append(AppendRequest(invocation_id, 1, [NewEvent("tick", {"t": began})]))
        await asyncio.sleep(tick)


async def measure(kind: str, passes: Callable[[Store], Awaitable[None]], sizes: Sizes) -> Side:
    side = Side()
    async with opened(kind) as store:
        live = await fill(store, sizes.chatty_invocations, sizes.chatty_events)
        setattr(store, "delete_expired", timed(store, side))  # noqa: B010 (timed as it runs)
        stop = asyncio.Event()
        ticking = asyncio.create_task(appending(store, live, sizes.chatty_tick, side, stop))
        await asyncio.sleep(0.5)
        side.gaps.clear()
        began = time.perf_counter()
        await asyncio.wait_for(passes(store), sizes.deadline)
        side.seconds = time.perf_counter() - began
        stop.set()
        await ticking
    return side


async def run(sizes: Sizes) -> list[Row]:
    rows: list[Row] = []
    size = f"{sizes.chatty_invocations} x {sizes.chatty_events:,} events"
    for kind, label in (("sqlite", "embedded store"), ("postgres", "PostgreSQL")):
        new = await measure(kind, reaper_passes, sizes)
        old = await measure(kind, old_passes, sizes)
        details = {
            "invocations": sizes.chatty_invocations,
            "events_each": sizes.chatty_events,
            "transactions": [len(new.transactions), len(old.transactions)],
            "events_deleted": [new.events, old.events],
        }
        baseline = "500 invocations a transaction, no event bound"
        for figure, unit, now, before in (
            (
                "longest retention transaction",
                "ms",
                max(new.transactions) * 1000,
                max(old.transactions) * 1000,
            ),
            (
                f"longest gap between appends every {sizes.chatty_tick * 1000:.0f} ms meanwhile",
                "ms",
                max(new.gaps) * 1000,
                max(old.gaps) * 1000,
            ),
            ("s until all were deleted", "s", new.seconds, old.seconds),
        ):
            rows.append(
                Row(
                    scenario="retention",
                    figure=f"{label}, {size}: {figure}",
                    value=now,
                    unit=unit,
                    better="lower",
                    baseline=before,
                    baseline_label=baseline,
                    details=details,
                )
            )
    return rows
