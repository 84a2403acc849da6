"""One running attempt's event log writer: cursors handed out at once, rows written in batches.

``emit`` returns the event's cursor without waiting for the database (the attempt is the only
writer of its invocation's log while it holds the fence). A flush task writes whatever has
accumulated in one fenced transaction and only then publishes it, so no reader ever sees an
event that is not durable. Events still buffered when a worker dies were never seen by anyone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tether.events import Event
from tether.outcomes import started_data
from tether.pubsub import PubSub, publish_events
from tether.store.journal import CancelPending, NewWait
from tether.store.schema import RESUME, Claim
from tether.store.store import (
    AppendRequest,
    NewEvent,
    Store,
    StoreError,
    StoreUnavailable,
    Superseded,
)

log = logging.getLogger(__name__)

MAX_BUFFERED = 1000
RETRY_FIRST = 0.1
RETRY_MAX = 1.0
TRANSIENT = (StoreUnavailable,)
"""What a lost or restarting database raises (wrapped by the store); anything else is not
retried."""
T = TypeVar("T")

Append = Callable[[AppendRequest], Awaitable[list[Event]]]
"""How a writer stores a batch: ``Store.append``, or a group commit over many writers."""


class EventWriter:
    """The :class:`shared.context.AttemptSink` of one attempt."""

    def __init__(
        self,
        store: Store,
        pubsub: PubSub,
        claim: Claim,
        append: Append | None = None,
        retry_for: float = 0.0,
    ) -> None:
        self._store = store
        self._retry_for = retry_for
        self._append = append or store.append
        self._pubsub = pubsub
        self._claim = claim
        self._next_cursor = claim.started_cursor
        self._buffer: list[NewEvent] = []
        self._lock = asyncio.Lock()
        self._flush_task: asyncio.Task[None] | None = None
        self._checkpoint = claim.checkpoint
        self.superseded = False
        self.parked = False
        self.parking = False
        """Between the handler's park and its unwinding: the row may already be ``waiting``."""
        self.cancel_pending = False
        """A cancel, requested while the attempt ran, stopped it from parking."""

    async def emit(self, event_type: str, data: Any) -> int:
        if self.superseded:
            raise Superseded(self._claim.invocation_id)
        self._next_cursor += 1
        self._buffer.append(NewEvent(event_type, data))
        if len(self._buffer) >= MAX_BUFFERED:
            await self.flush()
        elif self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.create_task(self._flush_soon())
        return self._next_cursor

    async def _flush_soon(self) -> None:
        try:
            await self.flush()
        except Superseded:
            self.superseded = True
        except StoreError as exc:  # the next flush or the finish retries the same events
            log.warning("invocation %s: writing events failed (%s)", self._claim.invocation_id, exc)

    async def flush(self) -> None:
        """Write and publish every buffered event."""
        async with self._lock:
            if not self._buffer:
                return
            batch = self._buffer
            self._buffer = []
            try:
                claim = self._claim
                stored = await self._append(
                    AppendRequest(claim.invocation_id, claim.attempt, batch)
                )
            except Exception:
                self._buffer = batch + self._buffer
                raise
        await publish_events(self._pubsub, self._claim.invocation_id, stored)

    async def take_pending(self) -> list[NewEvent]:
        """Stop flushing and hand over what is still buffered (the finish writes it)."""
        async with self._lock:
            pending, self._buffer = self._buffer, []
            return pending

    def last_cursor(self) -> int:
        return self._next_cursor

    async def _retrying(self, what: str, write: Callable[[], Awaitable[T]]) -> T:
        """``write()``, repeated through a database outage for up to ``retry_for`` seconds, so a
        blip does not reach the handler as an error and fail the run. Repeating is safe: a
        step's first record wins, and a park that did commit is refused (superseded) after."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._retry_for
        delay = RETRY_FIRST
        while True:
            try:
                return await write()
            except TRANSIENT as exc:
                if self.superseded:
                    raise Superseded(self._claim.invocation_id) from exc
                if loop.time() + delay > give_up:
                    raise
                log.warning(
                    "invocation %s: %s failed (%s); retrying",
                    self._claim.invocation_id,
                    what,
                    type(exc).__name__,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)

    async def record_step(self, name: str, result: Any, error_type: str | None) -> None:
        claim = self._claim
        journal = self._store.journal
        if not await self._retrying(
            "recording a step",
            lambda: journal.record_step(
                claim.invocation_id, claim.attempt, name, result, error_type
            ),
        ):
            self.superseded = True
            raise Superseded(claim.invocation_id)

    async def park(self, waits: Sequence[NewWait]) -> None:
        """End this attempt as ``waiting`` (with its buffered events) and tell the readers."""
        self.parking = True
        try:
            stored = await self._park(waits)
        except BaseException:  # back in its handler: a stop cancels it again
            self.parking = False
            raise
        self.parked = True
        await publish_events(self._pubsub, self._claim.invocation_id, stored)

    async def _park(self, waits: Sequence[NewWait]) -> list[Event]:
        """Write the park (fenced): the events it stored; raises where it did not park."""
        claim = self._claim
        await self._retrying("writing events", self.flush)
        pending = await self.take_pending()
        journal = self._store.journal
        try:
            stored = await self._retrying(
                "parking",
                lambda: journal.park(claim.invocation_id, claim.attempt, waits, pending),
            )
        except CancelPending:  # the handler gets the cancel; its finish writes these events
            self._buffer = pending + self._buffer
            self.cancel_pending = True
            raise asyncio.CancelledError from None
        self.superseded = True  # nothing more may be written by this attempt
        if stored is None:
            raise Superseded(claim.invocation_id)
        return stored

    def checkpoint(self) -> Any:
        return self._checkpoint

    async def save_checkpoint(self, state: Any) -> None:
        await self.flush()
        await self._store.save_checkpoint(self._claim.invocation_id, self._claim.attempt, state)
        self._checkpoint = state

    def started_event(self) -> Event:
        resumed = self._claim.resumed_by == RESUME
        data = started_data(self._claim.attempt, resumed=resumed)
        return Event(self._claim.started_cursor, data["type"], data)
