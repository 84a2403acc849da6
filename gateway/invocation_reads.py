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
IN_FLIGHT = 4
"""Statements at once: a burst's batches overlap instead of queueing behind each other."""


class InvocationReads:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._batch: GroupCommit[str, Invocation | None] = GroupCommit(
            self._get_many, max_batch=BATCH, in_flight=IN_FLIGHT
        )

    async def _get_many(self, invocation_ids: list[str]) -> list[Invocation | None]:
        """``Store.get_many``, looked up at each flush (a test may replace it on a live app)."""
        return await self._store.get_many(invocation_ids)

    async def get(self, invocation_id: str) -> Invocation | None:
        """The invocation's row as it stands now; None when there is none."""
        return await self._batch.submit(invocation_id)
