"""Run limits: caps on the events one attempt may emit (count and JSON bytes) and on how long
its handler may run.

Every cap is per attempt: what one worker may be made to write or hold by one run of a
handler. A replacement or resumed attempt starts afresh (``limits.max_attempts`` bounds how
many there are), and time an invocation spends parked or queued never counts.

Past an event cap, ``ctx.emit`` raises :class:`~tether.context.LimitExceeded` and writes
nothing; the invocation then fails with ``limit_exceeded`` however the handler ends, and a
handler still running ``timers.limit_grace`` later is cancelled. Past the duration cap, the
handler is cancelled at once and the invocation fails the same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tether.context import LimitExceeded
from tether.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunLimits:
    """The caps of every attempt a runtime runs; 0 means no cap."""

    max_events: int = 0
    max_event_bytes: int = 0
    max_duration: float = 0.0
    grace: float = 5.0

    @classmethod
    def from_settings(cls, settings: Settings) -> RunLimits:
        return cls(
            max_events=settings.limits.max_events_per_run,
            max_event_bytes=settings.limits.max_event_bytes_per_run,
            max_duration=settings.timers.max_run_duration,
            grace=settings.timers.limit_grace,
        )


class AttemptLimits:
    """One attempt's limits: the :class:`~tether.context.EventBudget` its context charges, and
    its clock. The first breach is recorded in :attr:`exceeded`; ``stop`` (the runtime
    cancelling the handler) is called at once past the duration, ``grace`` s after an event
    cap."""

    def __init__(self, limits: RunLimits, invocation_id: str, stop: Callable[[], None]) -> None:
        self._limits = limits
        self._invocation_id = invocation_id
        self._stop = stop
        self._timers: list[asyncio.TimerHandle] = []
        self.events = 0
        self.event_bytes = 0
        self.exceeded: str | None = None
        """Which limit the attempt went past, or None."""

    def check(self) -> None:
        """:class:`LimitExceeded` once the attempt went past a limit: it may emit no more and
        may not park, so the run fails however its handler ends."""
        if self.exceeded is not None:
            raise LimitExceeded(f"this run went past its limit on {self.exceeded}")

    def charge(self, size: int) -> None:
        self.check()
        events, event_bytes = self.events + 1, self.event_bytes + size
        limits = self._limits
        if limits.max_events and events > limits.max_events:
            self._breach(f"events ({limits.max_events})", limits.grace)
        elif limits.max_event_bytes and event_bytes > limits.max_event_bytes:
            self._breach(f"event bytes ({limits.max_event_bytes})", limits.grace)
        else:
            self.events, self.event_bytes = events, event_bytes
            return
        raise LimitExceeded(f"this run went past its limit on {self.exceeded}")

    def start(self) -> None:
        """Start the clock, as the handler starts (on the attempt's loop)."""
        if self._limits.max_duration > 0:
            self._later(self._limits.max_duration, self._over_time)

    def finish(self) -> None:
        """The handler ended: no stop is due any more."""
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    def _over_time(self) -> None:
        if self.exceeded is None:
            self._record(f"running time ({self._limits.max_duration:g} s)")
        self._stop()

    def _breach(self, what: str, grace: float) -> None:
        self._record(what)
        self._later(grace, self._stop)

    def _record(self, what: str) -> None:
        self.exceeded = what
        log.warning("invocation %s: the run went past its limit on %s", self._invocation_id, what)

    def _later(self, delay: float, call: Callable[[], None]) -> None:
        self._timers.append(asyncio.get_running_loop().call_later(delay, call))
