"""One running attempt as the runtime holds it, and how an attempt that did not return ends."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import Enum

from tether.context import InvocationContext
from tether.errors import ErrorCode
from tether.outcomes import Outcome, cancelled, failed
from tether.store.schema import Claim
from tether.usage import BudgetExceeded
from tether.worker.attempt import EventWriter
from tether.worker.run_limits import AttemptLimits

log = logging.getLogger("tether.worker.runtime")


class StopReason(Enum):
    CANCEL = "cancel"
    SUPERSEDED = "superseded"
    SHUTDOWN = "shutdown"
    LIMIT = "limit"


@dataclass
class RunningAttempt:
    claim: Claim
    writer: EventWriter
    limits: AttemptLimits
    ctx: InvocationContext | None = None
    task: asyncio.Task[None] | None = None
    stop_reason: StopReason | None = None
    in_handler: bool = False

    def __post_init__(self) -> None:
        self.writer.before_park = self.limits.check  # a run past a limit fails, never waits

    def interruptible(self) -> bool:
        """In its handler and not parking: a stop cancels it (a parking attempt leaves by
        itself, its fenced park committed or refused)."""
        return self.in_handler and not self.writer.parking

    def leave(self, attempts: dict[str, RunningAttempt]) -> None:
        """Drop this attempt, which ended, from its process's running ones, unless a later
        attempt of its invocation took its place: a parked handler may still be unwinding (a
        ``finally`` that awaits) when its input resumes the run in the same process, and the
        resumed attempt must keep its heartbeat and its cancel."""
        if attempts.get(self.claim.invocation_id) is self:
            del attempts[self.claim.invocation_id]


def handler_failed(invocation_id: str, exc: BaseException) -> Outcome:
    """How a handler that raised ends (called in its ``except`` block, to log the traceback)."""
    if isinstance(exc, BudgetExceeded):
        log.info("invocation %s: %s", invocation_id, exc)
        return failed(ErrorCode.BUDGET_EXCEEDED)
    log.exception("invocation %s: handler raised", invocation_id)
    return failed(ErrorCode.INVOCATION_FAILED)


def unstopped_cancel(invocation_id: str, exc: asyncio.CancelledError) -> Outcome:
    """A CancelledError out of a handler whose attempt nobody stopped (called in its ``except``
    block). Unless this task is being cancelled (re-raised), it is the handler's own (a step's
    function, or a library, raised it): that fails the run as any exception does. Re-raised, it
    ended the attempt with no outcome, and recovery ran it again until ``max_attempts``."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise exc
    return handler_failed(invocation_id, exc)


def stopped_outcome(reason: StopReason) -> Outcome | None:
    """How an attempt stopped from outside ends: cancelled, failed past a run limit, or not at
    all (superseded, or shutting down: recovery owns it now)."""
    if reason is StopReason.CANCEL:
        return cancelled()
    if reason is StopReason.LIMIT:
        return failed(ErrorCode.LIMIT_EXCEEDED)
    return None


def log_stopped(running: RunningAttempt) -> None:
    """An attempt that ends without writing an outcome: parked, superseded, or handed back."""
    if running.writer.parked:
        log.info(
            "invocation %s: attempt %d parked; waiting",
            running.claim.invocation_id,
            running.claim.attempt,
        )
        return
    reason = StopReason.SUPERSEDED if running.writer.superseded else running.stop_reason
    log.info(
        "invocation %s: attempt %d stopped without finishing (%s)",
        running.claim.invocation_id,
        running.claim.attempt,
        (reason or StopReason.SUPERSEDED).value,
    )
