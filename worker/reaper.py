"""The reaper: replaces dead attempts, re-enqueues lost work, deletes expired invocations,
every ``timers.count_audit`` corrects open counts that drifted from the rows, and every
``timers.statistics_check`` analyzes the invocations if the planner's statistics fell far behind
them.

Every worker process runs a pass on a timer; passes are safe to run concurrently because every
transition is a conditional update that only one of them wins (and an audit writes a count only
under its row's lock).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tether import loops
from tether.errors import ErrorCode
from tether.outcomes import Outcome, cancelled, failed
from tether.services import Services
from tether.settings import Settings
from tether.store.errors import StoreError
from tether.store.schema import StaleAttempt
from tether.store.store import Finished, FinishRequest, Superseded

log = logging.getLogger(__name__)

REQUEUE_BATCH = 500
"""Most wake-ups a pass re-sends for queued invocations nobody claimed for ``requeue_after``,
less the messages already waiting in the queue (each carries one token or more): a token only
lets a worker claim the next fair invocation, whichever it names, and a worker whose attempt ends
claims again, so a backlog draining behind waiting messages (a flood) needs none re-sent; lost
messages (a gateway that died before sending) do."""
DELETE_BATCHES_PER_PASS = 100
"""Most retention transactions a pass runs (each bounded by
``tether.store.maintenance.EXPIRED_INVOCATIONS`` and ``EXPIRED_EVENTS``), one after the other
while more has expired, each followed by a pause as long as it took, for at most half
``timers.reaper_interval``; the rest waits for the next pass."""
MAX_DOUBLINGS = 64


@dataclass
class ReapReport:
    recovered: int = 0
    failed: int = 0
    cancelled: int = 0
    requeued: int = 0
    deleted: int = 0
    deleted_events: int = 0
    counts_corrected: int = 0

    def __str__(self) -> str:
        """``recovered 1, failed 0, …``: a log line's and ``tether reap``'s words."""
        return ", ".join(f"{name.replace('_', ' ')} {n}" for name, n in vars(self).items())


@dataclass
class Aftermath:
    """What a pass's replacements and endings owe the broker: sent together once every dead
    attempt is written, so a broker that stops answering (each command waits for its socket
    timeout) costs the pass one wait, not one per dead attempt, and every replacement is
    claimable meanwhile (``timers.claim_poll`` needs no message)."""

    tokens: dict[float, list[str]] = field(default_factory=dict)
    """Replacements' invocation ids, by their delay."""
    ended: list[tuple[str, Finished]] = field(default_factory=list)

    async def send(self, services: Services) -> None:
        await asyncio.gather(
            *(services.queue.send(ids, delay) for delay, ids in self.tokens.items()),
            *(services.after_terminal(invocation_id, done) for invocation_id, done in self.ended),
        )


@dataclass(frozen=True, slots=True)
class Recover:
    delay: float


def decide(stale: StaleAttempt, *, has_recover: bool, settings: Settings) -> Outcome | Recover:
    """What happens to an invocation whose attempt stopped beating."""
    if stale.cancel_requested:
        return cancelled()
    if not has_recover:
        return failed(ErrorCode.WORKER_LOST)
    if stale.handed_back:  # a stopping worker's (a deploy): no crash, no backoff
        return Recover(0.0)
    max_attempts = settings.limits.max_attempts
    if max_attempts and stale.crashes + 1 >= max_attempts:
        return failed(ErrorCode.RECOVERY_LIMIT_EXCEEDED)
    return Recover(recovery_delay(stale.crashes + 1, settings))


def recovery_delay(crash: int, settings: Settings) -> float:
    """The delay before replacing the ``crash``-th attempt lost to a crash (attempts that parked
    do not count): none for the first, then exponential backoff up to the cap."""
    if crash <= 1:
        return 0.0
    timers = settings.timers
    doublings = min(crash - 2, MAX_DOUBLINGS)  # no overflow on a poison pill's 2000th
    return float(min(timers.recovery_backoff_max, timers.recovery_backoff * 2.0**doublings))


class Reaper:
    def __init__(
        self,
        *,
        services: Services,
        settings: Settings,
        has_recover: bool,
        audit_now: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``audit_now``: the first pass audits the open counts, whatever
        ``timers.count_audit`` says (``tether reap``); else the first audit comes one period
        after start, jittered, so workers starting together do not audit together."""
        self.services = services
        self.store = services.store
        self.settings = settings
        self.has_recover = has_recover
        self._clock = clock
        self._next_audit = clock() if audit_now else self._after_period()
        self._next_statistics_check = clock()

    async def reap_once(self) -> ReapReport:
        report = ReapReport()
        stale_after = self.settings.timers.stale_after
        after = Aftermath()
        try:
            for stale in await self.store.stale_attempts(stale_after):
                await self._replace(stale, report, after)
        finally:  # what was written is sent, even when a later replacement failed
            await after.send(self.services)
        report.requeued += await self._requeue_unclaimed()
        await self.store.registry.delete_expired(self.settings.timers.retention)
        await self._delete_expired(report)
        if self._next_audit is not None and self._clock() >= self._next_audit:
            self._next_audit = self._after_period()
            report.counts_corrected = await self._audit()
        await self._check_statistics()
        counted = (report.recovered, report.failed, report.cancelled, report.requeued)
        if any(counted) or report.counts_corrected:
            log.info("reaper: %s", report)
        return report

    async def _delete_expired(self, report: ReapReport) -> None:
        """Retention: bounded transactions while more has expired, for half a pass's interval
        at most, each followed by a pause as long as it took: the rest of the work gets at least
        as much of the loop (the embedded store's transactions run on it) and of the database:
        without it on PostgreSQL, a live invocation's emit -> receive p99 while 10 M expired
        events went was 60-68 ms in two runs of three, with it 16-27 ms (``bench eventlog``)."""
        timers = self.settings.timers
        until = self._clock() + timers.reaper_interval / 2
        for _ in range(DELETE_BATCHES_PER_PASS):
            began = time.perf_counter()
            done = await self.store.delete_expired(timers.retention)
            report.deleted += done.invocations
            report.deleted_events += done.events
            if not done.more or self._clock() >= until:
                return
            await asyncio.sleep(time.perf_counter() - began)

    def _after_period(self) -> float | None:
        """When the next audit is due: one ``timers.count_audit`` (±20 %) on; None if off."""
        every = self.settings.timers.count_audit
        return self._clock() + loops.jittered(every) if every else None

    async def _audit(self) -> int:
        """Correct the open counts that drifted; how many. A failure is logged and waits for
        the next period: the pass's other work is done and reported."""
        try:
            return len(await self.store.audit_open_counts())
        except StoreError as exc:
            log.warning("open count audit failed (%s)", exc)
            return 0

    async def _check_statistics(self) -> None:
        """Every ``timers.statistics_check``: analyze the invocations where the planner
        believes far fewer queued, active or waiting than there are
        (:mod:`tether.store.planner_statistics`, which logs what it did). A failure is logged
        and waits for the next period. A pass that comes early by no more than its own jitter
        checks: else, whenever the pass before came early, the check would wait a whole pass
        more (2-4.4 s apart at the defaults, rather than 1.6-2.4)."""
        every = self.settings.timers.statistics_check
        early = self.settings.timers.reaper_interval * loops.PASS_JITTER
        if not every or self._clock() < self._next_statistics_check - early:
            return
        self._next_statistics_check = self._clock() + every
        try:
            await self.store.statistics.check()
        except StoreError as exc:
            log.warning("planner statistics check failed (%s)", exc)

    async def _requeue_unclaimed(self) -> int:
        """Re-send wake-ups for work nobody claimed for ``requeue_after``, up to
        :data:`REQUEUE_BATCH` less the messages waiting (all of it if they cannot be counted)."""
        waiting = await self.services.queue.waiting()
        room = REQUEUE_BATCH - (waiting or 0)
        if room <= 0:
            return 0
        unclaimed = await self.store.take_unclaimed(self.settings.timers.requeue_after, room)
        if unclaimed and await self.services.queue.send(unclaimed):
            return len(unclaimed)
        return 0

    async def _replace(self, stale: StaleAttempt, report: ReapReport, after: Aftermath) -> None:
        """End or requeue a dead attempt's invocation; what the broker must hear of it goes
        to ``after``, sent once every dead attempt of the pass is written."""
        stale_after = self.settings.timers.stale_after
        decision = decide(stale, has_recover=self.has_recover, settings=self.settings)
        if isinstance(decision, Recover):
            if await self.store.requeue_for_recovery(
                stale.invocation_id,
                stale.attempt,
                stale_after,
                decision.delay,
                crash=not stale.handed_back,
            ):
                log.warning(
                    "invocation %s: attempt %d %s; replacement in %.1fs",
                    stale.invocation_id,
                    stale.attempt,
                    "handed back by its stopping worker"
                    if stale.handed_back
                    else "lost its worker",
                    decision.delay,
                )
                after.tokens.setdefault(decision.delay, []).append(stale.invocation_id)
                report.recovered += 1
            return
        try:
            finished = await self.store.finish(
                FinishRequest(stale.invocation_id, stale.attempt, decision, stale_after=stale_after)
            )
        except Superseded:
            return  # another reaper or the attempt got there first, or a cancel came since
        log.warning(
            "invocation %s: attempt %d lost its worker; %s (%s)",
            stale.invocation_id,
            stale.attempt,
            decision.status.value,
            decision.error_code,
        )
        if decision.error_code is ErrorCode.CANCELLED:
            report.cancelled += 1
        else:
            report.failed += 1
        after.ended.append((stale.invocation_id, finished))
