"""Quiet spell: claims over a backlog that arrived after the database was analyzed with nothing
queued, before and after a worker's reaper checks the planner's statistics, against the same
backlog analyzed, in the same run.

Two private databases, each holding ``quiet_finished`` finished invocations, analyzed (``VACUUM
ANALYZE``) while nothing was queued: what a deployment's statistics are after a quiet spell.
Then each gets the same backlog, ``quiet_queued`` queued invocations across ``quiet_tenants``
tenants (one ``INSERT ... SELECT``), and only the baseline's table is analyzed again. A store of
one connection per database in this process claims 32 at a time (``Store.claim_next``, as a
worker's claim does) and finishes what it claimed (``finish_many``); one claim on each first
connects, compiles and plans. On the quiet database one more claim runs with the statistics as
they are (what claims cost until a reaper's next
check, ``timers.statistics_check``), then the reaper's check (``PlannerStatistics.check``,
the quiet spell's ``ANALYZE`` taken as long ago: it finds the planner believing 1 queued and
runs ``ANALYZE``); then ``quiet_claims`` claims on
each database, alternating. Figures: the median claim's wall time after the check, and the claim
before it, each against the baseline's median.
"""

from __future__ import annotations

import statistics
import time
from contextlib import ExitStack

from bench.procs import Database, private_database
from bench.report import Row
from bench.scenarios.common import Pg, Sizes
from bench.scenarios.tenancy import insert_queued
from tether.outcomes import completed
from tether.store.planner_statistics import FLOOR, PlannerStatistics
from tether.store.store import FinishRequest, Store

WORKER = "bench-quiet"
CLAIM = 32


def quiet_database(db: Database, sizes: Sizes, analyze_backlog: bool) -> None:
    """Finished rows analyzed, then the backlog (analyzed again if ``analyze_backlog``)."""
    pg = Pg(db)
    try:
        # analyzed by this scenario alone (where autovacuum runs, it might analyze the backlog)
        pg.conn.execute("ALTER TABLE tether_invocations SET (autovacuum_enabled = off)")
        pg.prefill_finished(sizes.quiet_finished)
        pg.conn.execute("VACUUM ANALYZE")
        tenants = [f"backlog-{k:03d}" for k in range(sizes.quiet_tenants)]
        share, rest = divmod(sizes.quiet_queued, len(tenants))
        counts = {t: share + (1 if k < rest else 0) for k, t in enumerate(tenants)}
        insert_queued(pg, counts, returning=False)
        pg.conn.execute("SELECT pg_stat_force_next_flush()")  # the check sees the changes
        if analyze_backlog:
            pg.conn.execute("ANALYZE tether_invocations")
    finally:
        pg.close()


async def claim_and_finish(store: Store) -> float:
    """One claim of :data:`CLAIM`, its seconds; what it started is finished afterwards."""
    started = time.perf_counter()
    claims = await store.claim_next(CLAIM, WORKER)
    took = time.perf_counter() - started
    if len(claims) != CLAIM:
        raise RuntimeError(f"a claim over the backlog started {len(claims)} of {CLAIM}")
    await store.finish_many(
        [FinishRequest(c.invocation_id, c.attempt, completed(None)) for c in claims]
    )
    return took


async def run(sizes: Sizes) -> list[Row]:
    if (sizes.quiet_claims + 2) * CLAIM + FLOOR > sizes.quiet_queued:
        raise ValueError("quiet_queued must hold every claim's and the check's floor")
    with ExitStack() as stack:
        quiet = stack.enter_context(private_database())
        analyzed = stack.enter_context(private_database())
        quiet_database(quiet, sizes, analyze_backlog=False)
        quiet_database(analyzed, sizes, analyze_backlog=True)
        stores = {
            "quiet": Store.postgres(quiet.sqlalchemy_url, pool_size=1, separate_reads=False),
            "analyzed": Store.postgres(analyzed.sqlalchemy_url, pool_size=1, separate_reads=False),
        }
        seconds: dict[str, list[float]] = {name: [] for name in stores}
        try:
            for store in stores.values():  # connected, compiled and planned once
                await claim_and_finish(store)
            before_check = await claim_and_finish(stores["quiet"])
            began = time.perf_counter()
            # a reaper's check, the quiet spell's ANALYZE taken as long ago (else the check
            # waits MIN_GAP_S from it)
            checker = PlannerStatistics(stores["quiet"].db, min_gap=0.0)
            check = await checker.check()
            check_s = time.perf_counter() - began
            if check is None or not check.analyzed:
                raise RuntimeError(f"the statistics check did not analyze the backlog: {check}")
            for _ in range(sizes.quiet_claims):  # alternating, so noise hits both alike
                for name, store in stores.items():
                    seconds[name].append(await claim_and_finish(store))
        finally:
            for store in stores.values():
                await store.close()
    ms = {name: [s * 1000 for s in taken] for name, taken in seconds.items()}
    baseline = statistics.median(ms["analyzed"])
    details = {
        "finished": sizes.quiet_finished,
        "queued": sizes.quiet_queued,
        "tenants": sizes.quiet_tenants,
        "claims": sizes.quiet_claims,
        "claim_ms": ms["quiet"],
        "baseline_claim_ms": ms["analyzed"],
        "claim_before_check_ms": before_check * 1000,
        "check_s": check_s,
        "analyze_s": check.seconds,
        "believed": [(s.status, s.believed, s.counted) for s in check.short],
    }
    where = f"{sizes.quiet_queued:,} queued ({sizes.quiet_tenants} tenants) after a quiet spell"
    label = "the same backlog analyzed"
    return [
        Row(
            scenario="quietspell",
            figure=f"ms per claim of {CLAIM}, {where}, after the reaper's check (median)",
            value=statistics.median(ms["quiet"]),
            unit="ms",
            better="lower",
            baseline=baseline,
            baseline_label=label,
            details=details,
        ),
        Row(
            scenario="quietspell",
            figure=f"ms for a claim of {CLAIM}, {where}, before the check",
            value=before_check * 1000,
            unit="ms",
            better="lower",
            baseline=baseline,
            baseline_label=label,
            details=details,
        ),
    ]
