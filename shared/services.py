"""What both sides talk to, opened and closed in one place: the store, pub/sub and the queue.

It also holds the one rule for what follows a terminal transition, whoever made it (the worker
finishing an attempt, the reaper ending a dead one, the API cancelling a queued one): wake its
readers with its events (not waited for), then hand the session to its successor.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from tether.credentials import CredentialVault
from tether.pubsub import PubSub, publish_events
from tether.queue import Queue
from tether.store.store import Finished, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Services:
    store: Store
    pubsub: PubSub
    queue: Queue
    credentials: CredentialVault | None = None
    """Callers' access tokens for the invocations this process both accepts and runs; None
    where the gateway and the worker are different processes (the token cannot travel)."""

    async def after_terminal(self, invocation_id: str, finished: Finished) -> None:
        """Forget the caller's token, wake the invocation's readers (their wake-up is sent, not
        waited for), then let its session's next invocation run."""
        if self.credentials is not None:
            self.credentials.discard(invocation_id)
        publish_events(self.pubsub, invocation_id, finished.events)
        if finished.successor_id is not None:
            await self.queue.send([finished.successor_id])


@contextlib.asynccontextmanager
async def opened(
    store: Store, pubsub: PubSub, queue: Queue, credentials: CredentialVault | None = None
) -> AsyncIterator[Services]:
    """Own the three for the block; each is closed even if another fails to close."""
    try:
        yield Services(store, pubsub, queue, credentials)
    finally:
        for name, close in (
            ("queue", queue.close),
            ("pubsub", pubsub.close),
            ("store", store.close),
        ):
            try:
                await close()
            except Exception as exc:
                log.warning("closing the %s failed (%s)", name, type(exc).__name__)
