"""What the gateway talks to: the store, pub/sub, and a way to enqueue work.

Distributed mode: PostgreSQL, Redis pub/sub, Dramatiq on Redis. Embedded mode (``tether dev``):
SQLite, in-memory pub/sub, and a worker node inside this very process.

New invocations are accepted in groups (:class:`Acceptor`): the requests that arrive together
share one transaction, and their messages go out together after it commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from shared.app import AgentApp
from shared.broker import AsyncEnqueuer
from shared.groupcommit import GroupCommit
from shared.node import run_node
from shared.pubsub import MemoryPubSub, PubSub, RedisPubSub
from shared.runtime import Enqueue, Runtime
from shared.settings import Settings
from shared.store.schema import NewInvocation
from shared.store.store import Accepted, Store

log = logging.getLogger(__name__)

EnqueueMany = Callable[[list[str]], Awaitable[None]]
"""Send ``run_invocation`` for each id, together."""


@dataclass
class Services:
    store: Store
    pubsub: PubSub
    enqueue: Enqueue
    queued: QueuedGauge
    embedded: bool
    acceptor: Acceptor


class Acceptor:
    """``store.accept`` then enqueue, for concurrent requests together (group commit)."""

    def __init__(self, store: Store, enqueue_many: EnqueueMany, max_open_per_owner: int) -> None:
        self._store = store
        self._enqueue_many = enqueue_many
        self._max_open_per_owner = max_open_per_owner
        # two flushes in flight: one batch fills while the other waits on the database
        self._batch: GroupCommit[NewInvocation, Accepted] = GroupCommit(self._flush, in_flight=2)

    async def accept(self, new: NewInvocation) -> Accepted:
        """Raises :class:`Conflict` or :class:`OwnerLimitReached` as ``store.accept`` does."""
        return await self._batch.submit(new)

    async def _flush(self, batch: list[NewInvocation]) -> list[Accepted | Exception]:
        results: list[Accepted | Exception | None] = [None] * len(batch)
        remaining = list(range(len(batch)))
        while remaining:  # one transaction per round; a repeated id waits for the next round
            seen: set[str] = set()
            now: list[int] = []
            later: list[int] = []
            for i in remaining:
                (later if batch[i].id in seen else now).append(i)
                seen.add(batch[i].id)
            got = await self._store.accept_many(
                [batch[i] for i in now], max_open_per_owner=self._max_open_per_owner
            )
            for i, result in zip(now, got, strict=True):
                results[i] = result
            remaining = later
        created = [r.invocation.id for r in results if isinstance(r, Accepted) and r.created]
        try:
            await self._enqueue_many(created)
        except Exception as exc:  # accepted all the same: the reaper re-enqueues them
            log.warning(
                "%d invocations (%s...): enqueue failed (%s); the reaper will retry",
                len(created),
                created[0],
                type(exc).__name__,
            )
        return [r for r in results if r is not None]


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


@contextlib.asynccontextmanager
async def distributed_services(settings: Settings) -> AsyncIterator[Services]:
    store = Store.postgres(settings.database_url)
    pubsub = RedisPubSub(settings.redis_url)
    enqueuer = AsyncEnqueuer(settings.redis_url, settings.worker.queue)
    try:
        acceptor = Acceptor(store, enqueuer.enqueue_many, settings.limits.max_active_per_owner)
        yield Services(store, pubsub, enqueuer.enqueue, QueuedGauge(store), False, acceptor)
    finally:
        await pubsub.close()
        await store.close()
        await enqueuer.close()


class LocalQueue:
    """The embedded mode's broker: run_invocation as a task on this loop."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None
        self._tasks: set[asyncio.Task[bool]] = set()
        self._timers: set[asyncio.TimerHandle] = set()

    async def enqueue(self, invocation_id: str, delay: float) -> None:
        loop = asyncio.get_running_loop()
        if delay > 0:
            handle = loop.call_later(delay, self._start, invocation_id)
            self._timers.add(handle)
        else:
            self._start(invocation_id)

    async def enqueue_many(self, invocation_ids: list[str]) -> None:
        for invocation_id in invocation_ids:
            self._start(invocation_id)

    def _start(self, invocation_id: str) -> None:
        if self.runtime is None:
            return  # not running: the reaper re-enqueues it after a restart
        task = asyncio.create_task(self.runtime.start(invocation_id))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[bool]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("starting an invocation failed (%s)", type(task.exception()).__name__)

    async def close(self) -> None:
        self.runtime = None
        for handle in self._timers:
            handle.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def embedded_services(settings: Settings, app: AgentApp) -> AsyncIterator[Services]:
    store = Store.embedded(settings.embedded_path)
    await store.migrate()
    pubsub = MemoryPubSub()
    local = LocalQueue()
    try:
        async with run_node(
            settings=settings, store=store, pubsub=pubsub, app=app, enqueue=local.enqueue
        ) as runtime:
            local.runtime = runtime
            try:
                acceptor = Acceptor(store, local.enqueue_many, settings.limits.max_active_per_owner)
                yield Services(store, pubsub, local.enqueue, QueuedGauge(store), True, acceptor)
            finally:
                await local.close()
    finally:
        await pubsub.close()
        await store.close()
