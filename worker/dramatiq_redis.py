"""The Dramatiq broker, built in this one place, and the messages Tether sends on it.

Messages carry ids only. ``run_invocation`` has retries off and no time limit: only the reaper
creates replacement attempts, and agent runs may take as long as they take.

Idle consumers are woken, not polled: every enqueue also publishes on the queue's wake channel,
and Tether's consumer waits on that channel between fetches where Dramatiq's sleeps a growing
back-off (up to ``worker.poll_timeout_ms``). A lost wake-up costs at most that poll interval,
which stays as the fallback. A consumer that is full (as many messages in hand as it may
prefetch) waits for an acknowledgement instead, and fetches as soon as half its room is free.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dramatiq
import redis
import redis.asyncio as aioredis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import (
    DEFAULT_DEAD_MESSAGE_TTL,
    DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_MAINTENANCE_CHANCE,
    MAINTENANCE_SCALE,
    RedisBroker,
    _RedisConsumer,
)
from dramatiq.common import dq_name
from dramatiq.errors import ConnectionClosed
from dramatiq.message import Message
from redis.exceptions import NoScriptError

from tether.channels import wake_channel
from tether.groupcommit import GroupCommit

RUN_INVOCATION = "run_invocation"
NAMESPACE = "dramatiq"
WAKE = b"1"
DISPATCH_LUA = (Path(dramatiq.__file__).parent / "brokers" / "redis" / "dispatch.lua").read_bytes()
MAX_UNPACK = 3000  # under half Lua's C stack (8,000), as Dramatiq computes it


def build_broker(redis_url: str) -> RedisBroker:
    """The worker's broker, with Dramatiq's default middleware (senders use AsyncEnqueuer)."""
    return TetherRedisBroker(url=redis_url)  # type: ignore[no-untyped-call]


class TetherRedisBroker(RedisBroker):
    """Dramatiq's Redis broker whose enqueues wake idle consumers and whose consumers wait for
    wake-ups instead of sleeping."""

    @property
    def consumer_class(self) -> type[_RedisConsumer]:
        return _WakeableConsumer

    def enqueue(
        self, message: dramatiq.Message[Any], *, delay: int | None = None
    ) -> dramatiq.Message[Any]:
        enqueued: dramatiq.Message[Any] = super().enqueue(message, delay=delay)
        with contextlib.suppress(redis.RedisError):  # only a wake-up: the next poll finds it
            self.client.publish(wake_channel(enqueued.queue_name), WAKE)
        return enqueued


class _WakeableConsumer(_RedisConsumer):
    def __init__(
        self, broker: TetherRedisBroker, queue_name: str, prefetch: int, timeout: int
    ) -> None:
        super().__init__(broker, queue_name, prefetch, timeout)  # type: ignore[no-untyped-call]
        self._idle_wait = timeout / 1000
        self._room = threading.Event()
        self._wake = broker.client.pubsub(ignore_subscribe_messages=True)
        self._wake.subscribe(wake_channel(queue_name))  # before any fetch: no wake-up is missed

    def __next__(self) -> Any:
        """The next prefetched message; else fetch; else wait (for room, or for work) and
        return None so that Dramatiq's consumer thread gets its turn (delayed messages, stop)."""
        try:
            while True:
                while self.message_cache:
                    data = self.message_cache.pop(0)
                    if data is not None:  # None: a message deleted since it was listed
                        message = Message.decode(data)
                        self.queued_message_ids.add(message.message_id)
                        return MessageProxy(message)
                room = self.prefetch - self.outstanding_message_count
                if room <= 0:
                    self._wait_for_room()
                    return None
                self.message_cache = self.broker.do_fetch(self.queue_name, room)
                if not self.message_cache:
                    self._wait_for_work()
                    return None
        except redis.ConnectionError as exc:
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]

    def _wait_for_room(self) -> None:
        deadline = time.monotonic() + self._idle_wait
        while self.outstanding_message_count > self.prefetch // 2:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._room.wait(remaining)
            self._room.clear()

    def _wait_for_work(self) -> None:
        try:
            if self._wake.get_message(timeout=self._idle_wait) is not None:
                while self._wake.get_message(timeout=0) is not None:
                    pass  # one fetch answers a whole burst of wake-ups
        except redis.RedisError:
            time.sleep(self._idle_wait)  # poll meanwhile; the next read reconnects

    def ack(self, message: Any) -> None:
        try:
            super().ack(message)  # type: ignore[no-untyped-call]
        finally:
            self._room.set()

    def nack(self, message: Any) -> None:
        try:
            super().nack(message)  # type: ignore[no-untyped-call]
        finally:
            self._room.set()

    def close(self) -> None:
        with contextlib.suppress(redis.RedisError, OSError):
            self._wake.close()
        super().close()


class AsyncEnqueuer:
    """``run_invocation`` messages sent from asyncio, as Dramatiq's own ``RedisBroker.enqueue``
    would send them (its Lua script, its message format), without a thread: the messages of
    concurrent callers go out in one pipeline, with one wake-up per queue."""

    def __init__(self, redis_url: str, queue: str) -> None:
        self._redis = aioredis.Redis.from_url(redis_url)
        self._queue = queue
        self._broker_id = str(uuid.uuid4())
        self._sha = hashlib.sha1(DISPATCH_LUA).hexdigest()
        self._batch: GroupCommit[tuple[str, float], None] = GroupCommit(self._send)

    async def send(self, invocation_ids: Sequence[str], delay: float) -> None:
        """The :class:`tether.queue.Transport` seam: a lone message joins whatever concurrent
        callers send meanwhile; a batch goes out in one pipeline of its own."""
        if len(invocation_ids) == 1:
            await self._batch.submit((invocation_ids[0], delay))
        elif invocation_ids:
            await self._send([(invocation_id, delay) for invocation_id in invocation_ids])

    async def close(self) -> None:
        await self._redis.aclose()

    def _message(self, invocation_id: str, delay: float) -> tuple[str, str, bytes]:
        redis_id = str(uuid.uuid4())
        options: dict[str, Any] = {"redis_message_id": redis_id}
        queue = self._queue
        if delay > 0:
            queue = dq_name(queue)
            options["eta"] = int(time.time() * 1000) + int(delay * 1000)
        message: dramatiq.Message[None] = dramatiq.Message(
            queue_name=queue,
            actor_name=RUN_INVOCATION,
            args=(invocation_id,),
            kwargs={},
            options=options,
        )
        return queue, redis_id, message.encode()

    async def _send(self, items: list[tuple[str, float]]) -> list[None]:
        messages = [self._message(invocation_id, delay) for invocation_id, delay in items]
        for attempt in (1, 2):
            try:
                await self._pipeline(messages)
                break
            except NoScriptError:  # Redis restarted and forgot the script
                if attempt == 2:
                    raise
                await self._redis.script_load(DISPATCH_LUA)
        return [None] * len(items)

    async def _pipeline(self, messages: list[tuple[str, str, bytes]]) -> None:
        now = int(time.time() * 1000)
        async with self._redis.pipeline(transaction=False) as pipe:
            for queue, redis_id, body in messages:
                roll = random.randint(1, MAINTENANCE_SCALE)  # as often as Dramatiq's own enqueue
                maintenance = int(roll <= DEFAULT_MAINTENANCE_CHANCE)
                pipe.evalsha(
                    self._sha,
                    1,
                    NAMESPACE,
                    "enqueue",
                    now,
                    queue,
                    self._broker_id,
                    DEFAULT_HEARTBEAT_TIMEOUT,
                    DEFAULT_DEAD_MESSAGE_TTL,
                    maintenance,
                    MAX_UNPACK,
                    redis_id,
                    body,
                )
            for queue in {queue for queue, _, _ in messages}:
                pipe.publish(wake_channel(queue), WAKE)
            await pipe.execute()
