"""Every stream's reads of the store, batched per gateway process.

A stream reads when it opens, when it replays what pub/sub did not bring, and when a quiet
stream re-checks the truth; each read is one :class:`~tether.store.eventreads.StreamRead`.
Reads that arrive together (a reconnect storm, thousands of streams re-checking) share one
statement (:class:`~tether.groupcommit.GroupCommit`: a lone read goes at once), so a storm of
opens costs a few queries and pooled connections, not one each.
"""

from __future__ import annotations

from tether.groupcommit import GroupCommit
from tether.store.store import Store, StreamPage, StreamRead

BATCH = 256
"""Reads per statement: 256 first pages of 16 events are ~4,000 rows."""
IN_FLIGHT = 4
"""Statements at once: a storm's batches overlap instead of queueing behind each other."""


class StreamReads:
    def __init__(self, store: Store) -> None:
        self._batch: GroupCommit[StreamRead, StreamPage | None] = GroupCommit(
            store.read_streams, max_batch=BATCH, in_flight=IN_FLIGHT
        )

    async def read(self, invocation_id: str, after: int, limit: int) -> StreamPage | None:
        """The invocation's events after ``after`` (at most ``limit``) with its owner, status and
        last cursor; None when it does not exist."""
        return await self._batch.submit(StreamRead(invocation_id, after, limit))
