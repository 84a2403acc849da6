"""Pub/sub through Redis for the distributed mode: one connection per process carries every
subscription of that process, and publishes go out in batches (:mod:`tether.pubsub` has the
rules every pub/sub keeps: never the truth, :data:`~tether.pubsub.RESYNC` after a gap, bounded
pending bytes per subscription)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tether import loops
from tether.groupcommit import GroupCommit
from tether.pubsub import MemoryPubSub, Subscription
from tether.repeated import REPORT_EVERY
from tether.settings import STREAM_BUFFER_BYTES

log = logging.getLogger(__name__)


MAX_WAITING_PUBLISHES = 10_000
"""Publishes a process holds for Redis at most. While Redis cannot be reached a flush can take
its socket timeout, and the wake-ups of every event, start and end pile up meanwhile; past this
many, new ones are dropped (a reader re-reads the store on its own timer, as after any lost
message)."""
CLOSE_WAIT = 5.0
"""Seconds ``close`` waits for the publishes still held; what is left then is not sent."""

PUBLISH_ALL = "for i = 1, #ARGV, 2 do redis.call('PUBLISH', ARGV[i], ARGV[i + 1]) end"
"""A batch's publishes, in order, as one command: ``channel, message, channel, message, ...``.
A pipeline of as many ``PUBLISH`` commands cost redis-py 17-21 us of CPU a message to write and
parse; the one script 5 us (32 a batch, on the reference machine)."""


class RedisPubSub(MemoryPubSub):
    """One Redis connection per process carries every subscription of that process.

    ``subscribe`` returns only once Redis confirmed the subscription, so a reader that subscribes
    and then reads the store cannot miss an event published in between.
    """

    def __init__(self, url: str, max_pending_bytes: int = STREAM_BUFFER_BYTES) -> None:
        super().__init__(max_pending_bytes)
        self._redis = aioredis.Redis.from_url(url, health_check_interval=10)
        self._pubsub = self._redis.pubsub()
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._publishes: GroupCommit[tuple[str, list[str]], None] = GroupCommit(self._publish_batch)
        self._publish_all = self._redis.register_script(PUBLISH_ALL)
        self._trouble = PublishTrouble()

    async def publish(self, channel: str, messages: list[str]) -> None:
        """Concurrent publishes go out together, in order, in one command on one connection
        (:data:`PUBLISH_ALL`; one at a time each would need a pooled connection apiece: the pool
        caps them at 100)."""
        await self._publishes.submit((channel, messages))

    def publish_soon(self, channel: str, messages: list[str]) -> None:
        """Joins the next batch; a failure, or a drop past :data:`MAX_WAITING_PUBLISHES`,
        only delays the readers (they re-read the store) and is reported
        (:class:`PublishTrouble`)."""
        if self._publishes.pending >= MAX_WAITING_PUBLISHES:
            self._trouble.dropped(channel)
            return
        sent = self._publishes.submit_nowait((channel, messages))
        sent.add_done_callback(lambda done: self._trouble.sent(channel, done))

    def listened(self, channel: str) -> bool:
        return True  # other processes' subscriptions are not known here

    async def _publish_batch(self, batch: list[tuple[str, list[str]]]) -> list[None]:
        pairs = [(channel, message) for channel, messages in batch for message in messages]
        if len(pairs) == 1:
            await self._redis.publish(*pairs[0])
        elif pairs:
            await self._publish_all(args=[part for pair in pairs for part in pair])
        return [None] * len(batch)

    @contextlib.asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[Subscription]:
        sub = Subscription(channel, self.max_pending_bytes)
        self.subscribers[channel].add(sub)
        try:
            try:
                await self._ensure_subscribed(channel)
            except (RedisError, OSError, TimeoutError) as exc:
                # degrade, don't fail: the reader reconnects and sends RESYNC, and readers
                # re-check the store on their own timers meanwhile
                log.warning(
                    "pub/sub subscribe failed (%s); relying on the store", type(exc).__name__
                )
                self._ensure_reader()
            yield sub
        finally:
            self._drop(sub)
            await self._unsubscribe_if_unused(channel)

    async def _ensure_subscribed(self, channel: str) -> None:
        confirmed = self._confirmed.get(channel)
        if confirmed is None:
            confirmed = asyncio.get_running_loop().create_future()
            self._confirmed[channel] = confirmed
            try:
                async with self._lock:
                    await self._pubsub.subscribe(channel)
            finally:
                self._ensure_reader()
        # every subscriber, not only the first, waits until Redis confirmed the channel
        await asyncio.wait_for(asyncio.shield(confirmed), timeout=10)

    async def _unsubscribe_if_unused(self, channel: str) -> None:
        if channel in self.subscribers:
            return
        async with self._lock:  # ordered with subscribes: a newcomer is never unsubscribed
            if channel in self.subscribers or channel not in self._confirmed:
                return
            del self._confirmed[channel]
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.unsubscribe(channel)

    def _ensure_reader(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read_forever(), name="tether-pubsub-reader")

    async def _read_forever(self) -> None:
        backoff = 0.1
        while True:
            try:
                message = await self._pubsub.get_message(timeout=1.0)
                backoff = 0.1
            except RuntimeError:  # no connection: nothing subscribed yet, or a subscribe failed
                await asyncio.sleep(backoff if self.subscribers else 0.05)
                if self.subscribers:
                    backoff = min(backoff * 2, 2.0)
                    await self._reconnect()
                continue
            except (RedisError, OSError) as exc:
                log.warning("pub/sub connection lost (%s); reconnecting", type(exc).__name__)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                await self._reconnect()
                continue
            if message is not None:
                self._dispatch(message)

    def _dispatch(self, message: dict[str, object]) -> None:
        channel = _text(message["channel"])
        if message["type"] == "message":
            self.deliver(channel, _text(message["data"]))
        elif message["type"] == "subscribe":
            confirmed = self._confirmed.get(channel)
            if confirmed is not None and not confirmed.done():
                confirmed.set_result(None)

    async def _reconnect(self) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self._pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
        self._pubsub = self._redis.pubsub()
        channels = list(self.subscribers)
        loop = asyncio.get_running_loop()
        self._confirmed = {c: f for c, f in self._confirmed.items() if c in self.subscribers}
        for channel in channels:
            if channel not in self._confirmed or self._confirmed[channel].done():
                self._confirmed[channel] = loop.create_future()
        try:
            if channels:
                async with self._lock:
                    await self._pubsub.subscribe(*channels)
        except (RedisError, OSError):
            return  # the next read fails again and retries
        self.resync_all()

    async def ping(self) -> None:
        await self._redis.ping()

    async def close(self) -> None:
        try:  # what publish_soon sent last, unless Redis cannot be reached
            await asyncio.wait_for(self._publishes.idle(), CLOSE_WAIT)
        except TimeoutError:  # the wait cancelled the flush in flight, and what waited for it
            log.info(
                "closing: publishes still waiting for Redis after %gs were not sent", CLOSE_WAIT
            )
        if self._reader is not None:
            await loops.cancel_and_wait([self._reader])
        with contextlib.suppress(RedisError, OSError):
            await self._pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
        await self._redis.aclose()
        await super().close()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class PublishTrouble:
    """Publishes that failed or were dropped, reported in one line at most every
    :data:`REPORT_EVERY` seconds (a batch that fails fails all its publishes, up to 256, and
    while Redis is away every batch does), naming the last channel and the count since the last
    line."""

    def __init__(self) -> None:
        self._failed = self._dropped = 0
        self._reported_at = -REPORT_EVERY
        self._reason = ""

    def sent(self, channel: str, sent: asyncio.Future[None]) -> None:
        exc = None if sent.cancelled() else sent.exception()
        if exc is not None and not isinstance(exc, asyncio.CancelledError):  # closing: no fault
            self._failed += 1
            self._reason = type(exc).__name__
            self._report(channel)

    def dropped(self, channel: str) -> None:
        self._dropped += 1
        self._report(channel)

    def _report(self, channel: str) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._reported_at < REPORT_EVERY:
            return
        self._reported_at = now
        if self._failed:
            log.warning(
                "publish to %s failed (%s): %d publishes failed since the last report",
                channel,
                self._reason,
                self._failed,
            )
        if self._dropped:
            log.warning(
                "publish to %s dropped: %d publishes dropped since the last report, %d or more "
                "waiting for Redis",
                channel,
                self._dropped,
                MAX_WAITING_PUBLISHES,
            )
        self._failed = self._dropped = 0
