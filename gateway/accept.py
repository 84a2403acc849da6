"""New invocations, accepted in groups: the requests that arrive together share one transaction,
and their messages go out together after it commits (never before: a worker must find the row).

Also the admission gauge: how many invocations are queued, read at most once a second.
"""

from __future__ import annotations

import asyncio
import time

from tether.credentials import CredentialVault, UserCredential
from tether.groupcommit import GroupCommit
from tether.queue import Queue
from tether.store.schema import NewInvocation
from tether.store.store import Accepted, AcceptResult, Store


class Acceptor:
    """``store.accept`` then enqueue, for concurrent requests together (group commit)."""

    def __init__(
        self,
        store: Store,
        queue: Queue,
        max_open_per_owner: int,
        credentials: CredentialVault | None = None,
    ) -> None:
        self._store = store
        self._queue = queue
        self._max_open_per_owner = max_open_per_owner
        self._credentials = credentials
        self._carried: dict[str, UserCredential] = {}
        # two flushes in flight: one batch fills while the other waits on the database
        self._batch: GroupCommit[NewInvocation, Accepted] = GroupCommit(self._flush, in_flight=2)

    async def accept(
        self, new: NewInvocation, credential: UserCredential | None = None
    ) -> Accepted:
        """Raises :class:`Conflict`, :class:`OwnerLimitReached` or :class:`ValueRefused` as
        ``store.accept`` does. ``credential`` (only with ``new.user_auth``) is kept in this
        process's vault once the invocation is the caller's, before its message goes out."""
        if credential is not None:
            self._carried[new.id] = credential
        try:
            return await self._batch.submit(new)
        finally:
            self._carried.pop(new.id, None)

    async def _flush(self, batch: list[NewInvocation]) -> list[AcceptResult]:
        results = await self._store.accept_many(batch, max_open_per_owner=self._max_open_per_owner)
        for result in results:  # the caller's own invocation only: never another's id
            if isinstance(result, Accepted) and self._credentials is not None:
                credential = self._carried.get(result.invocation.id)
                if credential is not None and result.invocation.owner == credential.user:
                    self._credentials.put(result.invocation.id, credential)
        await self._queue.send(
            [r.invocation.id for r in results if isinstance(r, Accepted) and r.created]
        )
        return results


class QueuedGauge:
    """The number of queued invocations, read at most once a second (admission control)."""

    def __init__(self, store: Store, max_age: float = 1.0) -> None:
        self._store = store
        self._max_age = max_age
        self._value = 0
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()

    async def value(self) -> int:
        if time.monotonic() - self._read_at > self._max_age:
            async with self._lock:
                if time.monotonic() - self._read_at > self._max_age:
                    self._value = await self._store.count_queued()
                    self._read_at = time.monotonic()
        return self._value
