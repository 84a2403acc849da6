"""The services of each mode, built from the settings: PostgreSQL, Redis pub/sub and Dramatiq
on Redis when distributed; SQLite, in-memory pub/sub and the node's own loop when embedded.

The worker's processes and the composition root (``tether gateway``, ``tether dev``) both build
them here, so every process opens and closes the same three things the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from tether.app import AgentApp
from tether.credentials import CredentialVault
from tether.pubsub import MemoryPubSub, RedisPubSub
from tether.queue import Queue
from tether.services import Services, opened
from tether.settings import Settings
from tether.store.store import Store
from tether.worker.enqueuer import AsyncEnqueuer
from tether.worker.local_queue import LocalQueue
from tether.worker.node import run_node


@contextlib.asynccontextmanager
async def distributed_services(
    settings: Settings, *, database_url: str | None = None
) -> AsyncIterator[Services]:
    store = Store.postgres(database_url or settings.database_url)
    pubsub = RedisPubSub(settings.redis_url, settings.limits.stream_buffer_bytes)
    queue = Queue(AsyncEnqueuer(settings.redis_url, settings.worker.queue))
    async with opened(store, pubsub, queue) as services:
        yield services


@contextlib.asynccontextmanager
async def embedded_node(settings: Settings, app: AgentApp) -> AsyncIterator[Services]:
    """The embedded store, migrated, with a worker node running on this loop."""
    store = Store.embedded(settings.embedded_path)
    local = LocalQueue()
    pubsub = MemoryPubSub(settings.limits.stream_buffer_bytes)
    # One process accepts and runs: the caller's token can reach the handler (memory only).
    vault = CredentialVault(settings.auth.user_token_ttl)
    async with opened(store, pubsub, Queue(local), vault) as services:
        await store.migrate()
        async with run_node(settings=settings, services=services, app=app) as runtime:
            local.runtime = runtime
            yield services
