"""Redis loss, noticed at once: re-send what a flush, a restart or a fail-over of the broker lost.

A message only lets a worker try to claim; PostgreSQL keeps every queued invocation. So when the
broker loses messages nothing is lost, but queued work would wait for ``timers.requeue_after``.
Each worker process checks every ``timers.broker_check`` seconds:

- a **marker key** (:func:`tether.channels.broker_marker`), set once and never expiring: gone
  means the data went (``FLUSHALL``, a restart without persistence). The watcher that sets it
  again (``SET NX``) re-sends; the others see a new token and leave it to that one.
- the server's **run_id**: a new one with the marker still there is a restart from persistence
  or a fail-over to a replica, which may have lost the last writes. The watcher that takes
  :func:`tether.channels.broker_resync` for that run_id re-sends.

A re-send cut short (Redis still coming back: a send or a read failed) stays owed by the
watcher that took the turn: its next check re-sends what is still missing, rather than leaving
the backlog to ``timers.requeue_after``.

Re-sending is once, and only what is missing: the queued invocations (in order) whose message
is not in the queue's hashes (:func:`tether.worker.dramatiq_private.message_hashes`). A
duplicate would be harmless (claiming is conditional) but a backlog re-sent whole would flood.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator

import dramatiq
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tether import loops
from tether.channels import broker_marker, broker_resync
from tether.queue import Send
from tether.settings import Settings
from tether.store.store import Store, StoreError
from tether.worker.dramatiq_private import message_hashes
from tether.worker.dramatiq_redis import tokens_in

log = logging.getLogger(__name__)

PAGE = 500
RESYNC_KEY_TTL = 3600


class BrokerWatch:
    def __init__(self, *, client: aioredis.Redis, queue: str, store: Store, send: Send) -> None:
        self._redis = client
        self._queue = queue
        self._store = store
        self._send = send
        self._seen: tuple[str, str] | None = None
        """(run_id, marker token) at the last check."""
        self._owed: str | None = None
        """Why this watcher took the turn to re-send, until a re-send goes through whole."""

    async def check(self) -> int | None:
        """Look once; re-send what was lost if this watcher is the one to (or still owes a
        re-send cut short). The number re-sent, or None when this watcher had nothing to re-send
        or its re-send was cut short again."""
        run_id = str((await self._redis.info("server"))["run_id"])
        marker = broker_marker(self._queue)
        token = _text(await self._redis.get(marker))
        first = self._seen is None
        if token is None:  # the data went: whoever sets the marker again re-sends
            fresh = uuid.uuid4().hex
            if await self._redis.set(marker, fresh, nx=True):
                token = fresh
                self._owed = "Redis has no marker" if first else "Redis lost or changed its data"
            else:
                token = _text(await self._redis.get(marker)) or ""
        elif self._seen is not None and self._seen[0] != run_id and self._seen[1] == token:
            # a new server that kept the marker: the last writes before it took over may be lost
            claim = broker_resync(self._queue, run_id)
            if await self._redis.set(claim, "1", nx=True, ex=RESYNC_KEY_TTL):
                self._owed = "Redis lost or changed its data"
        self._seen = (run_id, token)
        why = self._owed
        if why is None:
            return None
        sent, whole = await self.resync()
        if not whole:
            log.warning(
                "%s (queue %s): re-sent %d queued invocations, then a send failed; "
                "the next check sends the rest",
                why,
                self._queue,
                sent,
            )
            return None
        self._owed = None
        level = logging.WARNING if sent else logging.INFO
        log.log(level, "%s (queue %s): re-sent %d queued invocations", why, self._queue, sent)
        return sent

    async def resync(self) -> tuple[int, bool]:
        """Send every queued invocation whose message is not in Redis: the number sent, and
        whether every send went through."""
        present = await self._waiting_messages()
        sent, after, whole = 0, 0, True
        while True:
            page = await self._store.queued_page(after, PAGE)
            if not page:
                return sent, whole
            after = page[-1].seq
            missing = [q for q in page if q.invocation_id not in present]
            due = await self._store.mark_resent([q.invocation_id for q in missing if not q.delay])
            if due:
                if await self._send(due, 0.0):
                    sent += len(due)
                else:
                    whole = False
            for waiting in (q for q in missing if q.delay):
                if await self._send([waiting.invocation_id], waiting.delay):
                    sent += 1
                else:
                    whole = False

    async def _waiting_messages(self) -> set[str]:
        """Ids of the invocations with a message in Redis, due or delayed."""
        found: set[str] = set()
        for key in message_hashes(self._queue):
            async for _, data in self._redis.hscan_iter(key, count=1000):
                with contextlib.suppress(Exception):  # not one of ours: it carries no id
                    found.update(tokens_in(dramatiq.Message.decode(bytes(data)).args))
        return found

    async def watch(self, interval: float) -> None:
        failing = False
        while True:
            try:
                await self.check()
                failing = False
            except (RedisError, OSError, StoreError) as exc:
                if not failing:  # once per outage: Redis may be down for a while
                    log.warning("broker check failed (%s); retrying", type(exc).__name__)
                failing = True
            except Exception:
                log.exception("broker check failed unexpectedly")
            await asyncio.sleep(loops.jittered(interval))


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


@contextlib.asynccontextmanager
async def watching_broker(settings: Settings, store: Store, send: Send) -> AsyncIterator[None]:
    """Run a :class:`BrokerWatch` on this loop while the block runs (unless turned off)."""
    interval = settings.timers.broker_check
    if interval <= 0:
        yield
        return
    client = aioredis.Redis.from_url(settings.redis_url)
    watch = BrokerWatch(client=client, queue=settings.worker.queue, store=store, send=send)
    task = asyncio.create_task(watch.watch(interval), name="broker-watch")
    try:
        yield
    finally:
        await loops.cancel_and_wait([task])
        await client.aclose()
