"""Reads of single invocations by id, batched per gateway process.

Every status read (``GET /api/invocations/{id}``), cancel and input starts by reading the
invocation's row. Clients that poll a burst of background runs send thousands of such reads at
once; each read that arrives while a statement is in flight joins the next one
(:class:`~tether.groupcommit.GroupCommit`: a lone read goes at once, so it waits for nothing),
so a burst of reads costs a few statements and pooled connections, not one each. A read always
begins after it was asked, so it sees every write committed before its request arrived.
"""

from __future__ import annotations

from tether.groupcommit import GroupCommit
from tether.store.schema import Invocation
from tether.store.store import Store

BATCH = 256
"""Ids per statement."""
IN_FLIGHT = 2
"""Statements at once per process. A statement costs the gateway about as much CPU whatever its
size (a pooled connection lent and returned, the round trip, the task), so the reads that arrive
while the statements in flight run wait for one to end and go together in the next. With four
in flight a sweep of 2,000 status reads at concurrency 32 cost 315 us of gateway CPU per read
against 285 with one; but with one, right after a burst (PostgreSQL still busy with the
worker's writes, each statement slower), a read waited for the one in flight and then its own,
and the sweep took 1.2x as long. Two keep most of the saving and none of that wait: in the peer's
burst, side by side with the four of before, 0.843x the gateway's CPU per invocation and 0.911x
the time until terminal (``docs/performance-history.md``)."""
STALLED_AFTER = 0.5
"""Seconds after which a statement in flight no longer holds back the reads that arrive: one
that hangs (a connection half-open after a failover, a slow checkout) lets others start beside
it, up to :data:`MOST_IN_FLIGHT`."""
MOST_IN_FLIGHT = 4


class InvocationReads:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._batch: GroupCommit[str, Invocation | None] = GroupCommit(
            self._get_many,
            max_batch=BATCH,
            in_flight=IN_FLIGHT,
            stalled_after=STALLED_AFTER,
            most_in_flight=MOST_IN_FLIGHT,
        )

    async def _get_many(self, invocation_ids: list[str]) -> list[Invocation | None]:
        """``Store.get_many``, looked up at each flush (a test may replace it on a live app)."""
        return await self._store.get_many(invocation_ids)

    async def get(self, invocation_id: str) -> Invocation | None:
        """The invocation's row as it stands now; None when there is none."""
        return await self._batch.submit(invocation_id)
