"""One running attempt's event log writer: cursors handed out at once, rows written in batches.

``emit`` returns the event's cursor without waiting for the database (the attempt is the only
writer of its invocation's log while it holds the fence). Its events join the next batch of
:class:`EventBatches` at once: one fenced transaction for every attempt that emitted meanwhile,
which publishes each attempt's events only once they are stored, so no reader ever sees an event
that is not durable. Events still buffered when a worker dies were never seen by anyone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tether.events import Event
from tether.groupcommit import GroupCommit
from tether.outcomes import started_data
from tether.pubsub import PubSub, publish_events
from tether.store.journal import CancelPending, NewWait
from tether.store.parks import ParkRequest, ParkResult
from tether.store.schema import RESUME, Claim, Status
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


class EventBatches:
    """The buffered events of many attempts, stored together (group commit) and published.

    A writer joins the next batch as soon as it has events (no task of its own first) and its
    events are taken when the batch is written, so whatever it emits until then goes along. A
    batch publishes each attempt's stored events before it wakes their writers: one loop step
    from the write to the readers, where a writer publishing them itself took another. Attempts
    that park at once go together too (:meth:`park`: one transaction for their parks, their
    last events with them)."""

    def __init__(self, store: Store, pubsub: PubSub) -> None:
        self._store = store
        self._pubsub = pubsub
        self._group: GroupCommit[EventWriter, list[Event]] = GroupCommit(self._write)
        self._parks: GroupCommit[ParkRequest, list[Event]] = GroupCommit(
            self._park_many, gather_turns=store.gather_turns
        )

    def write_soon(self, writer: EventWriter) -> asyncio.Future[list[Event]]:
        """``writer``'s buffered events, in the next batch: its future has them stored."""
        return self._group.submit_nowait(writer)

    async def park(self, request: ParkRequest) -> list[Event]:
        """Park an attempt, in the next batch of parks: the events it stored. Raises
        :class:`CancelPending` or :class:`Superseded` where it did not park."""
        return await self._parks.submit(request)

    async def _park_many(self, requests: list[ParkRequest]) -> list[ParkResult | StoreError]:
        return await self._store.parks.park_many(requests)

    async def idle(self) -> None:
        """Wait until no batch is being written."""
        await self._group.idle()
        await self._parks.idle()

    async def _write(
        self, writers: list[EventWriter]
    ) -> list[list[Event] | Superseded | StoreError]:
        await self.drop_stored(writers)
        taken = [writer.take_buffer() for writer in writers]
        try:
            results = await self._store.append_many(
                [writer.request(events) for writer, events in zip(writers, taken, strict=True)]
            )
        except Exception:  # none stored: each writer keeps its events for the next write
            # (not on a cancel, at the loop's end: it may land after a commit, and no event
            # may be written twice)
            for writer, events in zip(writers, taken, strict=True):
                writer.put_back(events)
            raise
        for writer, events, result in zip(writers, taken, results, strict=True):
            if not isinstance(result, list):
                writer.put_back(events)
            else:
                writer.stored(result)
                publish_events(self._pubsub, writer.invocation_id, result)
        return results

    async def drop_stored(self, writers: list[EventWriter]) -> None:
        """A write that failed may have committed all the same (the connection lost during its
        commit, or the commit given up at ``timers.store_deadline``): the writers it failed
        drop what their log now holds past what they knew stored, so nothing is written twice
        and the cursors stay those ``emit`` returned. A write that was refused (superseded)
        committed nothing and is left alone."""
        unsure = [writer for writer in writers if writer.unsure]
        if not unsure:
            return
        rows = await self._store.get_many([writer.invocation_id for writer in unsure])
        for writer, row in zip(unsure, rows, strict=True):
            if row is not None and row.attempt == writer.attempt and row.status is Status.ACTIVE:
                writer.drop_stored(row.last_event_id)


class EventWriter:
    """The :class:`shared.context.AttemptSink` of one attempt."""

    def __init__(
        self,
        store: Store,
        pubsub: PubSub,
        claim: Claim,
        batches: EventBatches | None = None,
        retry_for: float = 0.0,
    ) -> None:
        self._store = store
        self._retry_for = retry_for
        self._batches = batches or EventBatches(store, pubsub)
        self._pubsub = pubsub
        self._claim = claim
        self._next_cursor = claim.started_cursor
        self._stored_cursor = claim.started_cursor
        """The last cursor known stored: a write's events follow it."""
        self.unsure = False
        """A write failed: it may have committed (:meth:`EventBatches.drop_stored`)."""
        self._buffer: list[NewEvent] = []
        self._writing: asyncio.Future[list[Event]] | None = None
        """This writer's place in the next (or the running) batch."""
        self._handing_over = False
        """The finish (or a park) takes what is buffered: a write that ends leaves the rest."""
        self._failed_writes = 0
        """Event writes failed in a row (an outage): the first is logged as a warning."""
        self._checkpoint = claim.checkpoint
        self.superseded = False
        self.parked = False
        self.parking = False
        """Between the handler's park and its unwinding: the row may already be ``waiting``."""
        self.cancel_pending = False
        """A cancel, requested while the attempt ran, stopped it from parking."""
        self.before_park: Callable[[], None] = _may_park
        """Raises where this attempt may not park (its run went past a limit)."""

    async def emit(self, event_type: str, data: Any) -> int:
        if self.superseded:
            raise Superseded(self._claim.invocation_id)
        self._next_cursor += 1
        self._buffer.append(NewEvent(event_type, data))
        if len(self._buffer) >= MAX_BUFFERED:
            await self.flush()
        elif self._writing is None:
            self._write_soon()
        return self._next_cursor

    def _write_soon(self) -> asyncio.Future[list[Event]]:
        writing = self._writing = self._batches.write_soon(self)
        writing.add_done_callback(self._written)
        return writing

    def _written(self, writing: asyncio.Future[list[Event]]) -> None:
        """A batch wrote (or failed to write) this writer's events; what it emitted since then
        goes in the next one. After a failure the next emit, flush or the finish writes the
        same events again. Runs once per write: as its callback, or first from a flush."""
        if self._writing is not writing:
            return
        self._writing = None
        exc = None if writing.cancelled() else writing.exception()
        if isinstance(exc, Superseded):
            self.superseded = True
        elif exc is not None:
            self._failed_writes += 1  # said once an outage, not at every emit's retry
            log.log(
                logging.WARNING if self._failed_writes == 1 else logging.DEBUG,
                "invocation %s: writing events failed (%s)",
                self._claim.invocation_id,
                type(exc).__name__,
            )
        else:
            if self._failed_writes:
                log.info(
                    "invocation %s: events written again after %d failed writes",
                    self._claim.invocation_id,
                    self._failed_writes,
                )
                self._failed_writes = 0
            if self._buffer and not self._handing_over:
                self._write_soon()

    def take_buffer(self) -> list[NewEvent]:
        """The buffered events, for the batch being written (see :meth:`put_back`)."""
        events, self._buffer = self._buffer, []
        return events

    def put_back(self, events: list[NewEvent]) -> None:
        """``events`` were not stored: they come before whatever was emitted since."""
        self._buffer = events + self._buffer
        self.unsure = True

    def stored(self, events: list[Event]) -> None:
        """A write of this writer's events committed."""
        if events:
            self._stored_cursor = events[-1].cursor
        self.unsure = False

    def drop_stored(self, last_event_id: int) -> None:
        """The log holds events up to ``last_event_id`` under this attempt: those of the buffer
        already there were written by a write that seemed to fail."""
        written = max(0, last_event_id - self._stored_cursor)
        if written:
            del self._buffer[:written]
            self._stored_cursor = last_event_id
        self.unsure = False

    @property
    def attempt(self) -> int:
        return self._claim.attempt

    @property
    def invocation_id(self) -> str:
        return self._claim.invocation_id

    def request(self, events: list[NewEvent]) -> AppendRequest:
        return AppendRequest(self.invocation_id, self._claim.attempt, events)

    async def flush(self) -> None:
        """Write and publish every buffered event; raises what a write raised (its events stay
        buffered)."""
        while self._buffer or self._writing is not None:
            writing = self._writing or self._write_soon()
            await self._settled(writing)
            if not writing.cancelled() and (exc := writing.exception()) is not None:
                raise exc

    async def take_pending(self) -> list[NewEvent]:
        """Stop writing and hand over what is still buffered (the finish writes it)."""
        self._handing_over = True
        while self._writing is not None:
            await self._settled(self._writing)
        if self.unsure:
            await self._retrying("writing events", lambda: self._batches.drop_stored([self]))
        return self.take_buffer()

    async def _settled(self, writing: asyncio.Future[list[Event]]) -> None:
        """Wait for ``writing`` (never cancelling it: the batch writes the events anyway, and
        its result must reach them), then note it, whether or not its callback ran yet."""
        if not writing.done():
            await asyncio.wait((writing,))
        self._written(writing)

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
        """Record a finished step, after the events emitted before it: a replacement attempt
        replays the step without storing those events again, so they must be stored first."""
        claim = self._claim
        journal = self._store.journal
        await self._retrying("writing events", self.flush)
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
        self.before_park()
        self.parking = True
        try:
            stored = await self._park(waits)
        except BaseException:  # back in its handler: a stop cancels it again
            self.parking = False
            raise
        self.parked = True
        publish_events(self._pubsub, self._claim.invocation_id, stored)

    async def _park(self, waits: Sequence[NewWait]) -> list[Event]:
        """Write the park (fenced): the events it stored; raises where it did not park."""
        claim = self._claim
        await self._retrying("writing events", self.flush)
        pending = await self.take_pending()
        request = ParkRequest(claim.invocation_id, claim.attempt, waits, pending)
        try:
            stored = await self._retrying("parking", lambda: self._batches.park(request))
        except CancelPending:  # the handler gets the cancel; its finish writes these events
            self._take_back(pending)
            self.cancel_pending = True
            raise asyncio.CancelledError from None
        except Superseded:
            self.superseded = True
            raise
        except Exception:  # not parked: the handler carries on, and these events are still its
            self._take_back(pending)
            raise
        self.superseded = True  # nothing more may be written by this attempt
        return stored

    def _take_back(self, pending: list[NewEvent]) -> None:
        """A park that did not happen gives back the events it took."""
        self.put_back(pending)
        self._handing_over = False

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


def _may_park() -> None:
    """Every attempt may park unless told otherwise (:class:`RunningAttempt`)."""
