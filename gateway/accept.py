"""New invocations, accepted in groups: the requests that arrive together share one transaction,
and their messages go out together after it commits (never before: a worker must find the row),
with one announcement of the batch's tenants to every worker
(:func:`tether.pubsub.announce_queued`).

Before anything is written, each rate-limited tenant of a batch takes its requests' tokens
from its bucket (one statement per tenant and batch, :mod:`tether.store.buckets`); the requests
its bucket cannot pay for are refused (:class:`TenantRateLimited`) and the rest are accepted
under the owner cap and each tenant's ``max_queued``.

Also the admission gauge: how many invocations are queued, read at most once a second.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Coroutine, Sequence
from typing import Any

from tether.credentials import CredentialVault, UserCredential
from tether.gateway.tenant_limits import Fresh, LimitsCache, LimitsSnapshot
from tether.groupcommit import GroupCommit
from tether.pubsub import PubSub, announce_queued
from tether.queue import Queue
from tether.store.buckets import Grant, Want
from tether.store.schema import NewInvocation
from tether.store.store import Accepted, AcceptResult, Store


class TenantRateLimited(Exception):
    """The tenant's accept bucket is empty: nothing of the request was written."""

    def __init__(self, tenant: str, retry_after: int) -> None:
        super().__init__(tenant)
        self.tenant = tenant
        self.retry_after = retry_after


Outcome = AcceptResult | TenantRateLimited
ACCEPTS_IN_FLIGHT = 1
"""Accept flushes a process runs at once. A flush is the tenants' limits (cached), their bucket
takes, the store's accept (one transaction; more when :mod:`tether.store.batching` splits the
batch: a repeated id, a held row, a value the database refuses), then the messages and the
announcement. On PostgreSQL its transaction costs about 1 ms of the gateway's CPU whatever its
size, ~30 us more per invocation, so under load one flush at a time, holding everything that
arrived meanwhile, beats two half-sized ones. With two processes, 2,000 posts at concurrency 32
went from 0.67-0.71 of the bare handler's rate to 0.72-0.88 (batches ~1.45x larger); with one the
gain is within the noise (``docs/performance-history.md``). The price: a request that arrives
during a flush waits for it to end, and a slow flush (a split batch, a row lock, Redis) holds
every accept of the process meanwhile, where the second slot kept the others moving. A lone
request still goes at once."""


class Acceptor:
    """``store.accept`` then enqueue, for concurrent requests together (group commit)."""

    def __init__(
        self,
        store: Store,
        queue: Queue,
        max_open_per_owner: int,
        credentials: CredentialVault | None = None,
        limits: LimitsCache | None = None,
        pubsub: PubSub | None = None,
    ) -> None:
        self._store = store
        self._queue = queue
        self._pubsub = pubsub
        self._max_open_per_owner = max_open_per_owner
        self.limits = limits or LimitsCache(store.tenants)
        """Tenants' limits as this process knows them (at most a second old)."""
        self._credentials = credentials
        self._carried: dict[tuple[str, str], UserCredential] = {}
        """(invocation id, owner) → the credential its request carries until the flush: by id
        alone, another owner's request for the same id would replace the caller's."""
        self._batch: GroupCommit[NewInvocation, Accepted] = GroupCommit(
            self._flush, in_flight=ACCEPTS_IN_FLIGHT, gather_turns=store.gather_turns
        )

    async def accept(
        self, new: NewInvocation, credential: UserCredential | None = None
    ) -> Accepted:
        """Raises :class:`TenantRateLimited`, or :class:`Conflict`, :class:`OwnerLimitReached`,
        :class:`TenantLimitReached` or :class:`ValueRefused` as ``store.accept`` does.
        ``credential`` (only with ``new.user_auth``) is kept in this process's vault once the
        invocation is the caller's, before its message goes out."""
        key = (new.id, new.owner)
        if credential is not None:
            self._carried[key] = credential
        try:
            return await self._batch.submit(new)
        finally:
            if credential is not None:
                self._carried.pop(key, None)

    async def _flush(self, batch: list[NewInvocation]) -> list[Outcome]:
        snapshot = await self.limits.value()
        outcomes: list[Outcome | None] = list(await self._rate_limited(batch, snapshot))
        passing = [new for new, refused in zip(batch, outcomes, strict=True) if refused is None]
        caps = {
            tenant: cap
            for tenant in {new.tenant_or_owner for new in passing}
            if (cap := snapshot.of(tenant).max_queued) is not None
        }
        results = await self._store.accept_many(
            passing, max_open_per_owner=self._max_open_per_owner, max_queued=caps
        )
        accepted = iter(results)
        done = [next(accepted) if outcome is None else outcome for outcome in outcomes]
        for result in results:  # the caller's own invocation only: never another's id
            if isinstance(result, Accepted) and self._credentials is not None:
                invocation = result.invocation
                if invocation.status.is_terminal:  # a repeat of a finished run: nothing runs
                    continue  # it, so nothing would forget its token
                credential = self._carried.get((invocation.id, invocation.owner))
                if credential is not None and invocation.owner == credential.user:
                    self._credentials.put(invocation.id, credential)
        created = [r.invocation for r in results if isinstance(r, Accepted) and r.created]
        sends: list[Coroutine[Any, Any, object]] = [self._queue.send([new.id for new in created])]
        if self._pubsub is not None:  # beside the tokens, which may queue behind a flood
            sends.append(announce_queued(self._pubsub, sorted({new.tenant for new in created})))
        await asyncio.gather(*sends)
        return done

    async def _rate_limited(
        self, batch: Sequence[NewInvocation], snapshot: LimitsSnapshot
    ) -> list[TenantRateLimited | None]:
        """Take each rate-limited tenant's tokens for the batch; the requests its bucket cannot
        pay for (the latest of the batch) are refused, in place, but for a repeat of the
        caller's own accepted id (a client's retry): the store answers it as ever (its
        invocation, or 409 for another body), never 429 for what it already accepted."""
        wants: dict[str, Want] = {}
        for tenant, count in Counter(new.tenant_or_owner for new in batch).items():
            limits = snapshot.of(tenant)
            if limits.rate is not None:
                wants[tenant] = Want(count, limits.rate, limits.bucket_size)
        grants: dict[str, Grant] = await self._store.buckets.take(wants) if wants else {}
        left = {tenant: grant.granted for tenant, grant in grants.items()}
        refused: list[TenantRateLimited | None] = []
        for new in batch:
            tenant = new.tenant_or_owner
            if tenant not in grants:  # no rate limit
                refused.append(None)
            elif left[tenant] > 0:
                left[tenant] -= 1
                refused.append(None)
            else:
                refused.append(TenantRateLimited(tenant, grants[tenant].retry_after))
        if any(refused):
            named = [new for new, no in zip(batch, refused, strict=True) if no is not None]
            known = await self._store.get_many([new.id for new in named])
            repeats = {
                new.id
                for new, had in zip(named, known, strict=True)
                if had and had.owner == new.owner
            }
            refused = [
                None if new.id in repeats else no for new, no in zip(batch, refused, strict=True)
            ]
        return refused


class QueuedGauge(Fresh[int]):
    """The number of queued invocations, read at most once a second (admission control)."""

    def __init__(self, store: Store, max_age: float = 1.0) -> None:
        super().__init__(store.count_queued, 0, max_age)
