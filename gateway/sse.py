"""Server-sent events: replay from the store after a cursor, then tail pub/sub, no gap, no dup.

The reader subscribes before it reads the store, so an event committed meanwhile arrives by one
path or the other; cursors it has already sent are dropped. When pub/sub may have lost messages
(a gap in cursors, a reconnect, or a quiet ping interval) it re-reads the store.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from aiohttp import web

from tether.channels import events_channel
from tether.events import Event, decode_batch
from tether.pubsub import CLOSING, RESYNC, PubSub, Subscription
from tether.store.store import Store

log = logging.getLogger(__name__)

REPLAY_PAGE = 1000
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "Connection": "keep-alive",
}


def frame(event: Event) -> bytes:
    data = json.dumps(event.data, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event.cursor}\nevent: {event.type}\ndata: {data}\n\n".encode()


@dataclass
class EventStream:
    """One client's stream of one invocation's events."""

    store: Store
    pubsub: PubSub
    invocation_id: str
    response: web.StreamResponse
    ping_interval: float
    last_sent: int = 0
    done: bool = False

    async def run(self, open_streams: set[Subscription]) -> None:
        async with self.pubsub.subscribe(events_channel(self.invocation_id)) as sub:
            open_streams.add(sub)
            try:
                await self._replay()
                await self._check_finished()
                while not self.done:
                    if not await self._next(sub):
                        await self.response.write(b": server shutting down, reconnect\n\n")
                        return
            finally:
                open_streams.discard(sub)

    async def _next(self, sub: Subscription) -> bool:
        message = await sub.get(timeout=self.ping_interval)
        if message is CLOSING:
            return False
        if message is None:
            await self.response.write(b": ping\n\n")
            await self._replay()  # a quiet stream re-checks the truth
            await self._check_finished()
        elif message is RESYNC:
            await self._replay()
        elif isinstance(message, str):
            batch = decode_batch(message)
            if batch and batch[0].cursor > self.last_sent + 1:
                await self._replay()  # missed something: the store has it
            else:
                await self._send(batch)
        return True

    async def _check_finished(self) -> None:
        """A client already past the terminal event (or a deleted run) gets an empty stream."""
        if self.done:
            return
        invocation = await self.store.get(self.invocation_id)
        if invocation is None or (
            invocation.status.is_terminal and self.last_sent >= invocation.last_event_id
        ):
            self.done = True

    async def _replay(self) -> None:
        while not self.done:
            batch = await self.store.events_after(self.invocation_id, self.last_sent, REPLAY_PAGE)
            await self._send(batch)
            if len(batch) < REPLAY_PAGE:
                return

    async def _send(self, batch: list[Event]) -> None:
        chunks = []
        for event in batch:
            if event.cursor <= self.last_sent or self.done:
                continue
            chunks.append(frame(event))
            self.last_sent = event.cursor
            self.done = event.is_terminal
        if chunks:
            await self.response.write(b"".join(chunks))
