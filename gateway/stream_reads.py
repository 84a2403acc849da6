"""Every stream's reads of the store, batched per gateway process, with what it has kept.

A stream reads when it opens, when it replays what pub/sub did not bring, and when a quiet
stream re-checks the truth; each read is one :class:`~tether.store.eventreads.StreamRead`.
Reads that arrive together (a reconnect storm, thousands of streams re-checking) share one
statement (:class:`~tether.groupcommit.GroupCommit`: a lone read goes at once), so a storm of
opens costs a few queries and pooled connections, not one each. What the reads found is kept
(:mod:`~tether.gateway.replay_cache`): a read asks the store only for the events past what is
kept, and a finished log confirmed within the last second needs no statement at all.
"""

from __future__ import annotations

from tether.gateway.replay_cache import Replay, ReplayCache, Wanted
from tether.groupcommit import GroupCommit
from tether.settings import REPLAY_CACHE_BYTES
from tether.store.store import Store, StreamPage, StreamRead

BATCH = 256
"""Reads per statement: 256 first pages of 16 events are ~4,000 rows."""
IN_FLIGHT = 4
"""Statements at once: a storm's batches overlap instead of queueing behind each other."""


class StreamReads:
    """The reads of a batch share their invocations' rows (:mod:`tether.store.eventreads`), and
    the kept logs share their events and frames among every stream of the process."""

    def __init__(self, store: Store, cache_bytes: int = REPLAY_CACHE_BYTES) -> None:
        self._batch: GroupCommit[StreamRead, StreamPage | None] = GroupCommit(
            store.read_streams, max_batch=BATCH, in_flight=IN_FLIGHT
        )
        self.kept = ReplayCache(cache_bytes)

    async def read(self, wanted: Wanted) -> Replay | None:
        """The page of ``wanted`` (:class:`~tether.gateway.replay_cache.Wanted`) with the
        invocation's owner, status, last cursor and seq; None when it does not exist. A reader
        that names the row may be answered from a finished log kept here, with no statement."""
        invocation_id = wanted.invocation_id
        trusted = self.kept.trusted(wanted)
        if trusted is not None:
            return trusted
        kept = self.kept.kept(wanted)
        kept_seq, events, frames = kept if kept is not None else (None, [], [])
        asked_at = self.kept.now()
        more = max(0, wanted.limit - len(events))
        read = StreamRead(invocation_id, wanted.after + len(events), more)
        page = await self._batch.submit(read)
        if page is None:
            self.kept.forget(invocation_id)
            return None
        if kept_seq is not None and kept_seq != page.seq:  # another row: read it whole
            self.kept.forget(invocation_id)
            return await self.read(wanted)
        new_frames = self.kept.remember(invocation_id, page, asked_at)
        if not events:
            return Replay(page, new_frames)
        page = StreamPage(
            page.owner, page.status, page.last_event_id, page.seq, events + page.events
        )
        return Replay(page, frames + new_frames)
