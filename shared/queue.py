"""The queue seam: how either side asks the workers to run invocations.

A message only lets a worker try to claim; the invocation row is the truth. So a send that fails
(Redis down, a flush, the process going away) loses nothing: the row stays ``queued`` and the
reaper re-sends it after ``timers.requeue_after``. That is why :meth:`Queue.send` never raises.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

log = logging.getLogger(__name__)


class Transport(Protocol):
    """What actually carries the messages: Dramatiq on Redis, or the embedded node's loop."""

    async def send(self, invocation_ids: Sequence[str], delay: float) -> None: ...

    async def waiting(self) -> int:
        """Messages sent and not yet taken to their end (due or delayed); a message carries one
        token or more."""
        ...

    async def close(self) -> None: ...


class Queue:
    """Sends tokens (``run_invocations`` messages); a failure is logged, never raised."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    async def send(self, invocation_ids: Sequence[str], delay: float = 0.0) -> bool:
        """Send a token per id after ``delay`` seconds (as few messages as the transport
        packs them in); False if it is left to the reaper."""
        if not invocation_ids:
            return True
        try:
            await self._transport.send(list(invocation_ids), delay)
        except Exception as exc:
            log.warning(
                "invocation %s%s: enqueue failed (%s); the reaper will re-send it",
                invocation_ids[0],
                f" and {len(invocation_ids) - 1} more" if len(invocation_ids) > 1 else "",
                type(exc).__name__,
            )
            return False
        return True

    async def waiting(self) -> int | None:
        """Messages sent and not yet taken to their end; None if the transport cannot tell now
        (logged)."""
        try:
            return await self._transport.waiting()
        except Exception as exc:
            log.warning("counting the queue's messages failed (%s)", type(exc).__name__)
            return None

    async def ping(self) -> None:
        """Raise if the transport cannot answer now (``/readyz``)."""
        await self._transport.waiting()

    async def close(self) -> None:
        await self._transport.close()


Send = Callable[[Sequence[str], float], Awaitable[bool]]
"""``Queue.send`` as a value, for code that only sends."""
