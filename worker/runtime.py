"""Runs attempts: claim → handler → finish, many at once on one event loop.

A process's concurrency is bounded by ``concurrency`` slots, not by threads: a handler awaiting a
model call holds a slot, never a thread. A message is a token: it takes a free slot and claims
whatever PostgreSQL says runs next (:mod:`tether.store.claims`); a slot that frees claims again.

Every write is fenced by the attempt number, so an attempt that was superseded while it ran can
change nothing and is cancelled locally.
"""

from __future__ import annotations

import asyncio
import logging

from tether import loops
from tether.app import AgentApp, Handler
from tether.durable import Suspend, ungrouped_parks
from tether.errors import ErrorCode
from tether.groupcommit import GroupCommit
from tether.jsonvalue import InvalidJson, encoded
from tether.logs import DirectInfo
from tether.outcomes import Outcome, cancelled, completed, failed
from tether.pubsub import publish_events
from tether.repeated import Repeated
from tether.services import Services
from tether.store.schema import Claim
from tether.store.store import (
    Finished,
    FinishRequest,
    NewEvent,
    StoreError,
    StoreUnavailable,
    Superseded,
    ValueRefused,
)
from tether.worker.attempt import EventBatches, EventWriter
from tether.worker.contexts import AttemptContexts
from tether.worker.newcomers import NewcomerClaims
from tether.worker.refills import FreedSlots
from tether.worker.run_limits import AttemptLimits, RunLimits
from tether.worker.running import (
    RunningAttempt,
    StopReason,
    handler_failed,
    log_stopped,
    stopped_outcome,
    unstopped_cancel,
)
from tether.worker.slots import Slots

log = DirectInfo(logging.getLogger(__name__))  # a line as each attempt starts and ends
__all__ = ["RunningAttempt", "Runtime", "StopReason"]  # StopReason: re-exported for callers

CLAIMS_IN_FLIGHT = 1
"""Claim transactions at once: with two, a burst's second found the first's heads locked and probed
again; one took 0.82-0.91x the CPU per no-op, its bunches parked in batches (perf. history)."""
FINISH_RETRY_FIRST = 0.1
FINISH_RETRY_MAX = 1.0


class Runtime:
    """The attempts one process runs."""

    def __init__(
        self,
        *,
        services: Services,
        app: AgentApp,
        name: str,
        concurrency: int,
        max_event_bytes: int,
        reserve: int = 0,
        finish_retry: float = 0.0,
        inline_sleep_max: float = 5.0,
        limits: RunLimits | None = None,
        thread_keep: int = 200,
    ) -> None:
        self.services = services
        self.store = services.store
        self.pubsub = services.pubsub
        self.app = app
        self.name = name
        self.attempts: dict[str, RunningAttempt] = {}
        self._claims_in_flight = 0
        self.slots = Slots(concurrency, reserve)
        """Shared with the Dramatiq threads that hand tokens over (:mod:`.host`)."""
        self.freed = FreedSlots(
            lambda: len(self.attempts) + self._claims_in_flight + len(self._abandoned),
            self.claim_freed_slot,
        )
        self._newcomers = NewcomerClaims(
            self.slots,
            self.store,
            name,
            self._begin,
            lambda: self.attempts.values(),
            self.freed,
            another=lambda: self._claims.pending > 0,
            closing=lambda: self._closing,
        )
        self._abandoned: set[tuple[str, int]] = set()
        """Attempts left ``active`` for recovery (handed back, or their finish failed): never
        beaten again, not even by worker name while a claim is in flight; they hold caps."""
        self._claims: GroupCommit[str, Claim | None] = GroupCommit(
            self._claim_batch, in_flight=CLAIMS_IN_FLIGHT
        )
        self._finishes: GroupCommit[FinishRequest, Finished] = GroupCommit(
            services.store.finish_many, gather_turns=services.store.gather_turns
        )
        self._events = EventBatches(services.store, services.pubsub)
        self._contexts = AttemptContexts(
            services,
            app,
            max_event_bytes=max_event_bytes,
            inline_sleep_max=inline_sleep_max,
            thread_keep=thread_keep,
        )
        self._finish_retry = finish_retry
        self._limits = limits or RunLimits()
        self._closing = False
        self._claims_failed = Repeated(logging.getLogger(__name__))  # a store down fails each pass

    async def start(self, hint: str = "") -> bool:
        """A token (``hint``: its invocation id; PostgreSQL decides what runs) claims with a free
        slot. False: no slot or nothing may run; the work waits for a freed slot or a pass."""
        if self._closing or not self.slots.try_take():
            if hint:
                self.freed.token_found_no_slot(hint)
            return False
        return await self.start_in_slot(hint)

    async def claim_freed_slot(self) -> bool | None:
        """A freed slot's claim (:mod:`.refills`); None: no slot was free (a token took it)."""
        if self._closing or not self.slots.try_take():
            return None
        return await self.start_in_slot()

    async def start_in_slot(self, hint: str = "") -> bool:
        """Claim with a slot the caller took; the slot is given back unless an attempt starts."""
        if self._closing:
            self.slots.give()
            return False
        self._claims_in_flight += 1
        try:
            claim = await self.freed.claimed(self._claims.submit(hint), hint)
            if claim is None:
                self.slots.give()
                return False
            self._begin(claim)
        except BaseException:
            self.slots.give()
            raise
        finally:
            self._claims_in_flight -= 1
        return True

    def announced(self, tenants: list[str] | None) -> None:
        """A gateway announced new work of these tenants (None: some may have been missed): the
        next claims read them, and with only reserved slots free, a newcomers' claim starts."""
        self.store.announced(tenants)
        if not self._closing and tenants is not None:
            self._newcomers.announced(tenants)

    async def claim_free(self) -> int:
        """Claim for every free slot (the node's periodic pass); the attempts started. The
        reserved slots claim for tenants with nothing running."""
        taken = 0
        while not self._closing and self.slots.try_take():
            taken += 1
        started = await asyncio.gather(
            *(self.start_in_slot() for _ in range(taken)), return_exceptions=True
        )
        if failed := [r for r in started if isinstance(r, BaseException)]:
            self._claims_failed.warning(
                "claiming for free slots failed (%s)", type(failed[0]).__name__
            )
        if not self._closing:
            self._newcomers.after_pass()
        return sum(1 for r in started if r is True)

    def _begin(self, claim: Claim) -> None:
        """Register a won attempt and run it on this loop."""
        invocation_id = claim.invocation_id
        # an attempt's events, stored with the other attempts' writing meanwhile (group commit)
        writer = EventWriter(self.store, self.pubsub, claim, self._events, self._finish_retry)
        limits = AttemptLimits(
            self._limits,
            invocation_id,
            lambda: self.stop(invocation_id, StopReason.LIMIT, claim.attempt),
        )
        running = RunningAttempt(claim, writer, limits)
        self.attempts[invocation_id] = running
        running.task = asyncio.create_task(self._run(running), name=f"invocation-{invocation_id}")

    async def _claim_batch(self, hints: list[str]) -> list[Claim | None]:
        """N tokens (and the reserved slots lent them), one claim transaction."""
        named, count = [h for h in hints if h], len(hints)
        won: list[Claim | None] = list(
            await self._newcomers.lending(
                lambda lent: self.store.claim_next(count, self.name, named, reserved=lent), count
            )
        )
        for hint, claim in zip(hints, won, strict=False):
            if hint and claim is not None and claim.invocation_id != hint:
                log.debug("token for invocation %s claimed %s", hint, claim.invocation_id)
        return won + [None] * (len(hints) - len(won))

    async def settled(self) -> None:
        """Wait for the claims in flight: freed slots', reserved ones', every batch's."""
        await self._newcomers.settled()  # its slots given back may start freed slots' claims
        await self.freed.settled()
        await self._claims.idle()

    async def _run(self, running: RunningAttempt) -> None:
        claim = running.claim
        try:
            publish_events(self.pubsub, claim.invocation_id, [running.writer.started_event()])
            log.info("invocation %s: attempt %d started", claim.invocation_id, claim.attempt)
            running.ctx = await self._contexts.build(running)
            if running.ctx is None:
                log.warning(
                    "invocation %s: attempt %d needs credentials this process lacks; failing it",
                    claim.invocation_id,
                    claim.attempt,
                )
                outcome: Outcome | None = failed(ErrorCode.USER_AUTH_RECOVERY_UNSUPPORTED)
            else:
                outcome = await self._execute(running, self.app.handler_for(claim.is_recovery))
            if outcome is None:
                log_stopped(running)
            else:
                await self._finish(running, outcome)
        except Superseded:
            running.writer.superseded = True
            log_stopped(running)
        except asyncio.CancelledError:
            if running.stop_reason is None:
                raise
        except StoreError as exc:
            log.error(
                "invocation %s: attempt %d could not be finished (%s); recovery will take it",
                claim.invocation_id,
                claim.attempt,
                exc,
            )
            self._abandoned.add((claim.invocation_id, claim.attempt))
        finally:
            running.leave(self.attempts)
            self.slots.give()
            if not self._closing:
                self.freed.slot_freed()

    async def _execute(self, running: RunningAttempt, handler: Handler | None) -> Outcome | None:
        claim, ctx = running.claim, running.ctx
        if handler is None:
            return failed(ErrorCode.WORKER_LOST)
        if running.stop_reason is not None or ctx is None:  # stopped before its handler began
            return None if running.stop_reason is None else stopped_outcome(running.stop_reason)
        running.in_handler = True
        running.limits.start()
        try:
            output = await ungrouped_parks(handler(claim.input, ctx))
        except (Suspend, Superseded):  # parked (the invocation is waiting), or superseded:
            return None  # its attempt is over
        except asyncio.CancelledError as exc:
            if running.stop_reason is StopReason.CANCEL or running.writer.cancel_pending:
                return cancelled()
            if running.stop_reason is None:
                return unstopped_cancel(claim.invocation_id, exc)
            return stopped_outcome(running.stop_reason)
        except BaseException as exc:  # noqa: BLE001 (whatever the handler raised: its run ends)
            if running.limits.exceeded is None:
                return handler_failed(claim.invocation_id, exc)
        finally:
            running.in_handler = False
            running.limits.finish()
        if running.limits.exceeded is not None:  # however the handler ended
            return failed(ErrorCode.LIMIT_EXCEEDED)
        try:
            text = encoded(output)  # checked here, so an invalid output keeps the run's events
        except InvalidJson as exc:
            log.error("invocation %s: invalid output: %s", claim.invocation_id, exc)
            return failed(ErrorCode.INVALID_OUTPUT)
        return completed(output, text)

    async def _finish(self, running: RunningAttempt, outcome: Outcome) -> None:
        claim = running.claim
        pending = await running.writer.take_pending()
        try:
            finished = await self._write_outcome(running, outcome, pending)
        except ValueRefused as exc:
            # The database refused the output or a buffered event, for this attempt alone (the
            # others of its batch finished): end it without them, never with a replacement.
            log.error("invocation %s: the store refused the outcome (%s)", claim.invocation_id, exc)
            outcome = failed(ErrorCode.INVALID_OUTPUT)
            finished = await self._write_outcome(running, outcome, [])
        log.info("invocation %s: %s", claim.invocation_id, outcome.status.value)
        await self.services.after_terminal(claim.invocation_id, finished)

    async def _write_outcome(
        self, running: RunningAttempt, outcome: Outcome, pending: list[NewEvent]
    ) -> Finished:
        """The fenced finish, retried through a database outage for up to ``finish_retry`` s, so a
        run that ended during a brief outage is not run again by recovery. Repeating is safe: had
        a try that seemed to fail committed, the next one is :class:`Superseded`."""
        claim = running.claim
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._finish_retry
        delay = FINISH_RETRY_FIRST
        while True:
            try:
                # with the attempts finishing meanwhile, in one transaction
                request = FinishRequest(claim.invocation_id, claim.attempt, outcome, pending)
                return await self._finishes.submit(request)
            except StoreUnavailable as exc:
                if running.writer.superseded or loop.time() + delay > give_up:
                    raise
                log.warning(
                    "invocation %s: writing the outcome failed (%s); retrying",
                    claim.invocation_id,
                    exc,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, FINISH_RETRY_MAX)

    def owned(self) -> list[tuple[str, int]]:
        """(invocation id, attempt) of every running attempt; safe to call from another thread."""
        return [(key, running.claim.attempt) for key, running in list(self.attempts.items())]

    def claiming(self) -> bool:
        """Whether a claim is in flight (it may have committed already); thread-safe."""
        return self._claims_in_flight > 0

    def abandoned(self) -> list[tuple[str, int]]:
        """(invocation id, attempt) left to recovery; thread-safe."""
        return list(self._abandoned)

    def stop(self, invocation_id: str, reason: StopReason, attempt: int | None = None) -> None:
        """Cancel a running attempt's handler (user cancel, superseded, or shutdown)."""
        running = self.attempts.get(invocation_id)
        if running is None or running.task is None or running.task.done():
            return
        if attempt is not None and running.claim.attempt != attempt:
            return
        if running.stop_reason is None:
            running.stop_reason = reason
            interruptible = running.interruptible()
            if reason is StopReason.SUPERSEDED:
                running.writer.superseded = True
                # Otherwise this is mostly a heartbeat racing the attempt's own finish or park.
                log.log(
                    logging.WARNING if interruptible else logging.DEBUG,
                    "invocation %s: attempt %d superseded; stopping it",
                    invocation_id,
                    running.claim.attempt,
                )
            if running.ctx is not None:
                running.ctx.cancel_requested.set()
            if running.in_handler:  # a cancel its own wait_for drops is sent again; a
                # parking attempt is cancelled only if its park does not happen
                loops.cancel_while(running.task, lambda: running.in_handler, running.interruptible)

    def stop_all(self, reason: StopReason) -> None:
        for invocation_id in list(self.attempts):
            self.stop(invocation_id, reason)

    async def hand_back_all(self) -> None:
        """Another worker declared this process dead: stop every attempt (their writes are
        refused from now on) and hand back those the reaper has not replaced yet."""
        await self._hand_back(list(self.attempts.values()), StopReason.SUPERSEDED)

    async def drain(self, grace: float) -> None:
        """Stop taking work, let running attempts finish for ``grace`` s, hand the rest back."""
        self._closing = True
        log.info("stopping: no new claims; %d attempts running", len(self.attempts))
        await self.settled()
        tasks = [r.task for r in self.attempts.values() if r.task is not None]
        if tasks:
            log.info("waiting up to %.1fs for %d running attempts", grace, len(tasks))
            await asyncio.wait(tasks, timeout=grace)
        leftovers = list(self.attempts.values())
        await self._hand_back(leftovers, StopReason.SHUTDOWN)
        if leftovers:
            log.warning("handed %d unfinished attempts back for recovery", len(leftovers))
        await self._events.idle()  # a stopped handler's last events, still being written

    async def _hand_back(self, attempts: list[RunningAttempt], reason: StopReason) -> None:
        """Stop these attempts, then mark each stale (fenced): the next reap pass replaces it."""
        for running in attempts:
            self.stop(running.claim.invocation_id, reason)
        for running in attempts:
            if running.task is not None:
                await asyncio.gather(running.task, return_exceptions=True)
            key = (running.claim.invocation_id, running.claim.attempt)
            self._abandoned.add(key)  # before the release: a beat would make the row fresh again
            try:  # a stopping worker's hand-back is no crash; one declared dead's is
                await self.store.release(*key, stopping=reason is StopReason.SHUTDOWN)
            except StoreError as exc:
                log.warning("could not hand invocation %s back (%s)", key[0], exc)
