"""The services of each mode, built from the settings: PostgreSQL, Redis pub/sub and Dramatiq
on Redis when distributed; SQLite, in-memory pub/sub and the node's own loop when embedded.

The worker's processes and the composition root (``tether gateway``, ``tether dev``) both build
them here, so every process opens and closes the same three things the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

from tether.app import AgentApp
from tether.credentials import CredentialVault
from tether.pubsub import MemoryPubSub
from tether.pubsub_redis import RedisPubSub
from tether.queue import Queue
from tether.services import Services, opened
from tether.settings import Settings
from tether.store.store import Store
from tether.worker.enqueuer import AsyncEnqueuer
from tether.worker.local_queue import LocalQueue
from tether.worker.node import run_node

try:
    import fcntl
except ImportError:  # not on Windows: `tether dev` there recovers by heartbeats only
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def distributed_services(
    settings: Settings, *, database_url: str | None = None, separate_reads: bool = True
) -> AsyncIterator[Services]:
    """A gateway's services (or, with ``database_url`` and ``separate_reads=False``, a worker
    node's: see :meth:`Store.postgres`)."""
    store = Store.postgres(
        database_url or settings.database_url,
        separate_reads=separate_reads,
        deadline=settings.timers.store_deadline,
    )
    pubsub = RedisPubSub(settings.pubsub_redis, settings.limits.stream_buffer_bytes)
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
        with sole_server(settings.embedded_path) as alone:
            if alone is not None:
                await hand_back_dead_attempts(store)
            async with run_node(settings=settings, services=services, app=app) as runtime:
                local.runtime = runtime
                if alone is not None:
                    runtime.freed.every_token_comes_here(alone, services.store.none_seen_queued)
                yield services


async def hand_back_dead_attempts(store: Store) -> None:
    """This process alone serves the file, and has run nothing yet: every active attempt in it
    belongs to a ``tether dev`` that died. The node's first reap pass replaces them at once."""
    released = await store.release_active()
    if released:
        log.warning("%d attempts of an earlier tether dev on this file handed back", released)


@contextlib.contextmanager
def sole_server(path: str) -> Iterator[Callable[[], bool] | None]:
    """Hold an exclusive lock on ``<path>.lock`` while the block runs. When this is the one
    ``tether dev`` serving ``path``, yields a check that stays true until another process tries
    to serve it too: each that finds the lock taken signs the file (its pid), which the holder
    empties when it takes the lock, and holds a shared lock on ``<path>.peers`` while it serves,
    so that one taking the lock after its holder died knows it is not alone (the attempts that
    process runs are alive). The operating system drops the locks when the process ends,
    however it ends. A throwaway store (``:memory:``, a new file nobody else opens) is always
    alone. None (no recovery at start: heartbeats decide, after ``stale_after``) where locks are
    unsupported, or when another process serves the file."""
    if path == Store.THROWAWAY:
        yield lambda: True
        return
    if fcntl is None:
        yield None
        return
    lock_path, peers_path = Path(f"{path}.lock"), Path(f"{path}.peers")
    try:
        handle, peers = lock_path.open("a"), peers_path.open("a")
    except OSError as exc:
        log.warning("could not open %s (%s): no recovery at start", lock_path, exc)
        yield None
        return
    with handle, peers:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            # Shared first, then signed: a holder that empties the file before it looks at the
            # peers either sees this lock or finds the signature written after it emptied it.
            fcntl.flock(peers.fileno(), fcntl.LOCK_SH)  # the holder has it for an instant only
            handle.write(f"{os.getpid()}\n")  # the holder's freed slots claim from now on
            handle.flush()
            _not_alone(path)
            yield None
            return
        os.ftruncate(handle.fileno(), 0)
        try:  # a process that found the lock taken serves on after its holder died
            fcntl.flock(peers.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            _not_alone(path)
            yield None
            return
        fcntl.flock(peers.fileno(), fcntl.LOCK_UN)
        yield lambda: _unsigned(lock_path)


def _not_alone(path: str) -> None:
    log.warning(
        "another process serves %s: its running attempts are left to the heartbeat rule, and "
        "its runs' live events reach this process's streams only when they read the file again "
        "(timers.ping_interval): serve one file from one process",
        path,
    )


def _unsigned(lock_path: Path) -> bool:
    try:
        return lock_path.stat().st_size == 0
    except OSError:
        return False
