"""``run_invocations`` messages sent from asyncio: the :class:`tether.queue.Transport` of the
distributed mode, used by the gateway and by every worker node (successors, the reaper).

The tokens sent together (one accept flush, concurrent lone sends, a reaper pass) go in as few
messages as :data:`~tether.worker.dramatiq_redis.TOKENS_PER_MESSAGE` allows, one group per delay:
a message costs Redis a script call to enqueue and another to acknowledge, and the worker a fetch,
an actor call and an acknowledgement (measured in ``bench cost``: 11–13 Redis commands per no-op
invocation with one token per message, 4.4–5.5 with accept-sized batches;
docs/performance-history.md)."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from tether.groupcommit import GroupCommit
from tether.worker.dramatiq_private import (
    NAMESPACE,
    RedisMessage,
    check_dispatch_script,
    dispatch_script,
    enqueue_arguments,
    message_hashes,
    redis_message,
)
from tether.worker.dramatiq_redis import RUN_INVOCATIONS, TOKENS_PER_MESSAGE
from tether.worker.wakeups import publish_wake_up


@dataclass(frozen=True, slots=True)
class _Send:
    invocation_id: str
    delay: float


class AsyncEnqueuer:
    """Sends messages as Dramatiq's own ``RedisBroker.enqueue`` would (its Lua script, its
    message format; see :mod:`tether.worker.dramatiq_private`), without a thread: the tokens
    of concurrent callers go out in one pipeline, as few messages as :func:`token_messages`
    makes, with one wake-up per queue."""

    def __init__(self, redis_url: str, queue: str) -> None:
        self._script = dispatch_script()
        check_dispatch_script(self._script)
        self._sha = hashlib.sha1(self._script).hexdigest()
        self._redis = aioredis.Redis.from_url(redis_url)
        self._queue = queue
        self._broker_id = str(uuid.uuid4())
        self._batch: GroupCommit[_Send, None] = GroupCommit(self._send)

    async def send(self, invocation_ids: Sequence[str], delay: float) -> None:
        """The :class:`tether.queue.Transport` seam: a lone token joins whatever concurrent
        callers send meanwhile; a batch goes out in one pipeline of its own."""
        if len(invocation_ids) == 1:
            await self._batch.submit(_Send(invocation_ids[0], delay))
        elif invocation_ids:
            await self._send([_Send(invocation_id, delay) for invocation_id in invocation_ids])

    async def waiting(self) -> int:
        """Messages in Redis not yet acknowledged, due and delayed (two ``HLEN``)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in message_hashes(self._queue):
                pipe.hlen(key)
            return sum(int(n) for n in await pipe.execute())

    async def close(self) -> None:
        await self._redis.aclose()

    async def _send(self, sends: list[_Send]) -> list[None]:
        messages = [
            redis_message(self._queue, RUN_INVOCATIONS, (ids,), delay)
            for delay, ids in token_messages(sends)
        ]
        try:
            await self._pipeline(messages)
        except NoScriptError:  # Redis restarted (or flushed its scripts) and forgot ours
            await self._redis.script_load(self._script)
            await self._pipeline(messages)
        return [None] * len(sends)

    async def _pipeline(self, messages: list[RedisMessage]) -> None:
        now_ms = int(time.time() * 1000)
        async with self._redis.pipeline(transaction=False) as pipe:
            for message in messages:
                argv = enqueue_arguments(message, broker_id=self._broker_id, now_ms=now_ms)
                pipe.evalsha(self._sha, 1, NAMESPACE, *argv)
            for queue in {message.queue for message in messages}:
                publish_wake_up(pipe, queue)
            await pipe.execute()


def token_messages(sends: Sequence[_Send]) -> list[tuple[float, list[str]]]:
    """The messages that carry ``sends``: their ids grouped by delay, in order, at most
    :data:`TOKENS_PER_MESSAGE` to a message."""
    by_delay: dict[float, list[str]] = {}
    for send in sends:
        by_delay.setdefault(send.delay, []).append(send.invocation_id)
    return [
        (delay, ids[start : start + TOKENS_PER_MESSAGE])
        for delay, ids in by_delay.items()
        for start in range(0, len(ids), TOKENS_PER_MESSAGE)
    ]
