"""Every stream's reads of the store, batched per gateway process.

A stream reads when it opens, when it replays what pub/sub did not bring, and when a quiet
stream re-checks the truth; each read is one :class:`~tether.store.eventreads.StreamRead`.
Reads that arrive together (a reconnect storm, thousands of streams re-checking) share one
statement (:class:`~tether.groupcommit.GroupCommit`: a lone read goes at once), so a storm of
opens costs a few queries and pooled connections, not one each.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.events import Event
from tether.groupcommit import GroupCommit
from tether.store.store import Store, StreamPage, StreamRead

BATCH = 256
"""Reads per statement: 256 first pages of 16 events are ~4,000 rows."""
IN_FLIGHT = 4
"""Statements at once: a storm's batches overlap instead of queueing behind each other."""
FRAME_MEMO_BYTES = 8 * 1024 * 1024
"""Frames kept for the reads that share their events; past it the memo starts again."""


class StreamReads:
    """The reads of a batch share their invocations' rows (:mod:`tether.store.eventreads`): the
    same ``Event`` objects, so each is framed once (``framed``) however many streams send it."""

    def __init__(self, store: Store) -> None:
        self._batch: GroupCommit[StreamRead, StreamPage | None] = GroupCommit(
            store.read_streams, max_batch=BATCH, in_flight=IN_FLIGHT
        )
        self._frames: dict[int, tuple[Event, bytes]] = {}
        self._frame_bytes = 0

    def framed(self, event: Event, encode: Callable[[Event], bytes]) -> bytes:
        """``encode(event)`` (a pure encoder), made once per event object while memo allows."""
        kept = self._frames.get(id(event))
        if kept is not None and kept[0] is event:
            return kept[1]
        data = encode(event)
        if self._frame_bytes + len(data) > FRAME_MEMO_BYTES:
            self._frames.clear()
            self._frame_bytes = 0
        self._frames[id(event)] = (event, data)
        self._frame_bytes += len(data)
        return data

    async def read(self, invocation_id: str, after: int, limit: int) -> StreamPage | None:
        """The invocation's events after ``after`` (at most ``limit``) with its owner, status and
        last cursor; None when it does not exist."""
        return await self._batch.submit(StreamRead(invocation_id, after, limit))
