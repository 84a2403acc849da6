"""Recently read event logs, kept per gateway process, so a reconnect reads only what it lacks.

A stored event never changes: the event at (invocation, cursor) is the same for every reader until
retention deletes the invocation. So a gateway process keeps what its streams read from the store,
per invocation one run of consecutive cursors with each event's SSE frame, most recently used
kept longest, within ``limits.replay_cache_bytes``. A stream's read then asks the store only for
the invocation's facts (owner, status, last cursor, seq) and the events past what is kept, and
every stream of the invocation writes the same frame bytes, made once.

A log that is complete (its run ended and every event is kept) cannot change any more; it can only
be deleted by retention. It is replayed without the store for ``TRUSTED_FOR`` seconds after a
read of the store that confirmed it began, so a storm of reconnects to finished runs costs about
one statement per invocation per second. Only a reader that names the row gets it so: by its
``seq`` (a stream that has read it once, or a route holding the row) or by its owner (a reader
whose owner is checked against it). In that second a row that retention deletes may still be
replayed to its owner. An id reused after retention is another row (a larger ``seq``): what was
kept for the old row is dropped the first time a read shows the new one, a read that began
before the deletion never brings it back, and no reader of the new row is ever given it.

Pages are as long as the reader asks, kept or not: at most ``limit`` events, or kept events up to
``page_bytes`` of frames (their sizes are known), so a stream holds no more of the kept events at
a time than its page bound. The budget counts an estimate of each event's memory, not a measure:
the frame and the decoded JSON, which takes far more memory than its text when it holds many
small values (1 MB of ``[{}, {}, …]`` decodes to 25 MB of Python objects). So an event costs
``FRAME_FACTOR`` times its frame and ``PER_VALUE`` bytes for each ``{``, ``[``, ``,`` and ``:``
in it: each marks a value or member the decoded JSON holds, and the three colons of the frame's
``id:``, ``event:`` and ``data:`` lines stand for the ``Event`` itself. Measured against
``tracemalloc`` (``tests/unit/test_replay_cache.py``), the estimate is 1.0-2.0 times the real
size for events of 100 KB to 4 MB of empty objects, small objects, one-number lists, numbers or
text, 1.3-2.2 times for small agent events, and 5 times for a list of nulls (a pointer each).
Text that holds many of those characters itself (JSON or CSV sent as a string) is counted at up
to about 20 times its memory: fewer such events are kept, never more memory held.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from tether.events import Event
from tether.gateway.frames import frame
from tether.status import Status
from tether.store.store import StreamPage

TRUSTED_FOR = 1.0
"""Seconds a complete log is replayed without asking the store whether its row still exists."""
FRAME_FACTOR = 3
"""Bytes counted per byte of a kept event's frame: the frame, and the decoded JSON's text."""
PER_VALUE = 56
"""Bytes counted per ``{``, ``[``, ``,`` or ``:`` of a kept event's frame: the Python object
of the value or member it marks, and its slot in its container."""
ONE_LOG_SHARE = 4
"""One invocation's run is kept to at most this fraction of the budget (its latest events)."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """One read of a stream: ``invocation_id``'s events after cursor ``after``, at most
    ``limit`` from the store; kept ones at most ``limit``, or with ``page_bytes`` as many as
    their frames fit (at least one). The reader names the row by its ``seq`` or by the
    ``owner`` it checks, or neither (then only the store answers for the row)."""

    invocation_id: str
    after: int
    limit: int
    page_bytes: int | None = None
    seq: int | None = None
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class Replay:
    """What a stream's read found: the facts and events (``page``) and each event's frame."""

    page: StreamPage
    frames: list[bytes]


@dataclass(slots=True)
class KeptLog:
    """One invocation's kept run: ``events[k]`` has cursor ``first + k``, its frame ``frames[k]``;
    the facts are those of the store read that last confirmed it (``confirmed_at``)."""

    owner: str
    status: Status
    last_event_id: int
    seq: int
    first: int
    events: list[Event]
    frames: list[bytes]
    size: int
    confirmed_at: float

    @property
    def end(self) -> int:
        """The last kept cursor (``first - 1`` when none is kept)."""
        return self.first + len(self.events) - 1

    def complete(self) -> bool:
        return self.status.is_terminal and self.end >= self.last_event_id

    def after(self, wanted: Wanted) -> tuple[list[Event], list[bytes]]:
        """The kept page of ``wanted`` (none unless cursor ``wanted.after + 1`` is kept)."""
        if not self.first <= wanted.after + 1 <= self.end:
            return [], []
        k = wanted.after + 1 - self.first
        if wanted.page_bytes is None:
            end = k + wanted.limit
        else:
            end, size = k, 0
            for data in self.frames[k:]:
                size += len(data)
                if size > wanted.page_bytes and end > k:
                    break
                end += 1
        return self.events[k:end], self.frames[k:end]

    def named_by(self, wanted: Wanted) -> bool:
        """The reader named this row: by its seq, or by its owner (at least one given)."""
        seq, owner = wanted.seq, wanted.owner
        if seq is None and owner is None:
            return False
        return (seq is None or seq == self.seq) and (owner is None or owner == self.owner)

    def page(self, events: list[Event]) -> StreamPage:
        return StreamPage(self.owner, self.status, self.last_event_id, self.seq, events)


def cost(data: bytes) -> int:
    """The memory a kept event whose frame is ``data`` is counted for (the module's estimate)."""
    values = data.count(b"{") + data.count(b"[") + data.count(b",") + data.count(b":")
    return FRAME_FACTOR * len(data) + PER_VALUE * values


class ReplayCache:
    """The kept logs of one gateway process (``max_bytes`` 0: nothing is kept)."""

    def __init__(
        self,
        max_bytes: int,
        encode: Callable[[Event], bytes] = frame,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_bytes = max_bytes
        self._encode = encode
        self._clock = clock
        self._logs: OrderedDict[str, KeptLog] = OrderedDict()
        self._bytes = 0

    @property
    def size(self) -> int:
        """Bytes counted for every kept log."""
        return self._bytes

    def now(self) -> float:
        """The clock ``remember`` takes its ``asked_at`` from."""
        return self._clock()

    def trusted(self, wanted: Wanted) -> Replay | None:
        """The page of ``wanted`` without the store, when the reader names the row
        (:meth:`KeptLog.named_by`) and its log is complete, kept from ``wanted.after + 1`` (or
        past its end) and confirmed within ``TRUSTED_FOR``."""
        log = self._logs.get(wanted.invocation_id)
        if log is None or not log.complete() or wanted.after + 1 < log.first:
            return None
        if not log.named_by(wanted) or self._clock() - log.confirmed_at > TRUSTED_FOR:
            return None
        self._logs.move_to_end(wanted.invocation_id)
        events, frames = log.after(wanted)
        return Replay(log.page(events), frames)

    def kept(self, wanted: Wanted) -> tuple[int, list[Event], list[bytes]] | None:
        """(the row's seq, the kept page of ``wanted`` (:meth:`KeptLog.after`), its frames);
        None when nothing of the invocation is kept."""
        log = self._logs.get(wanted.invocation_id)
        if log is None:
            return None
        events, frames = log.after(wanted)
        return log.seq, events, frames

    def forget(self, invocation_id: str) -> None:
        log = self._logs.pop(invocation_id, None)
        if log is not None:
            self._bytes -= log.size

    def remember(self, invocation_id: str, page: StreamPage, asked_at: float) -> list[bytes]:
        """Keep what a store read that began at ``asked_at`` found (its events are consecutive
        cursors) and take its facts as confirmed then; returns the frames of ``page.events``,
        made here unless kept. A read of an older row than the one kept keeps nothing."""
        log = self._logs.get(invocation_id)
        if log is not None and page.seq < log.seq:  # began before the row was replaced
            return [self._encode(e) for e in page.events]
        if log is not None and log.seq != page.seq:
            self.forget(invocation_id)
            log = None
        if log is None:
            frames = [self._encode(e) for e in page.events]
            first = page.events[0].cursor if page.events else page.last_event_id + 1
            log = KeptLog(
                page.owner, page.status, page.last_event_id, page.seq, first, [], [], 0, -math.inf
            )
            self._extend(log, first, page.events, frames)
            self._logs[invocation_id] = log
        else:
            frames = self._merge(log, page.events)
        if asked_at >= log.confirmed_at:  # an earlier read's facts may be older than the log's
            log.owner, log.status, log.last_event_id = page.owner, page.status, page.last_event_id
            log.confirmed_at = asked_at
        self._logs.move_to_end(invocation_id)
        self._trim(invocation_id, log)
        return frames

    def _merge(self, log: KeptLog, events: list[Event]) -> list[bytes]:
        """Join ``events`` to the run where they meet or overlap it, else keep them instead."""
        if not events:
            return []
        low, high = events[0].cursor, events[-1].cursor
        if high + 1 < log.first or low > log.end + 1:  # apart: the newest read is kept
            frames = [self._encode(e) for e in events]
            self._bytes -= log.size
            log.events, log.frames, log.size = [], [], 0
            self._extend(log, low, events, frames)
            return frames
        before = events[: max(0, log.first - low)]
        past = events[max(0, log.end + 1 - low) :]
        before_frames = [self._encode(e) for e in before]
        past_frames = [self._encode(e) for e in past]
        mid_low, mid_high = max(low, log.first), min(high, log.end)
        mid = log.frames[mid_low - log.first : mid_high - log.first + 1]
        if before:
            self._extend(log, low, before, before_frames, front=True)
        if past:
            self._extend(log, log.first, past, past_frames)
        return before_frames + mid + past_frames

    def _extend(
        self,
        log: KeptLog,
        first: int,
        events: list[Event],
        frames: list[bytes],
        front: bool = False,
    ) -> None:
        added = sum(cost(f) for f in frames)
        if front:
            log.events, log.frames = events + log.events, frames + log.frames
        else:
            log.events, log.frames = log.events + events, log.frames + frames
        log.first = first
        log.size += added
        self._bytes += added

    def _trim(self, invocation_id: str, log: KeptLog) -> None:
        """Keep one log within its share (its oldest events go), then all within the budget
        (the least recently used logs go)."""
        share = self._max_bytes // ONE_LOG_SHARE
        drop, dropped = 0, 0
        while log.size - dropped > share and drop < len(log.frames):
            dropped += cost(log.frames[drop])
            drop += 1
        if drop:
            log.events, log.frames = log.events[drop:], log.frames[drop:]
            log.first += drop
            log.size -= dropped
            self._bytes -= dropped
        while self._bytes > self._max_bytes and self._logs:
            _, oldest = self._logs.popitem(last=False)
            self._bytes -= oldest.size
        if not log.events and invocation_id in self._logs:
            self.forget(invocation_id)  # nothing kept: not worth an entry
