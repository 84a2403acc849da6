"""Wake-ups: how an enqueue tells the idle Dramatiq consumers of a queue that it has work.

Both ends live here. :func:`publish_wake_up` is the one definition of "publish a wake-up for
queue Q", used by Dramatiq's own enqueues (the :class:`WakeUpOnEnqueue` middleware) and by
:class:`tether.worker.enqueuer.AsyncEnqueuer`; :class:`WakeUpListener` is what a woken consumer
waits on. A wake-up is only a hint: a lost one costs the consumer its poll interval.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Protocol

import dramatiq
import redis

from tether.channels import wake_channel

WAKE_UP = b"1"


class Publisher(Protocol):
    """A synchronous Redis client (the wake-up is sent at once) or a Redis pipeline, sync or
    asyncio (it is sent with the pipeline's batch)."""

    def publish(self, channel: str, message: bytes) -> Any: ...


def publish_wake_up(publisher: Publisher, queue: str) -> None:
    """Wake the idle consumers of ``queue`` (a queue name as enqueued: ``q``, or ``q.DQ``)."""
    publisher.publish(wake_channel(queue), WAKE_UP)


class WakeUpOnEnqueue(dramatiq.Middleware):
    """Publishes a wake-up after every message the broker enqueues (Dramatiq's public
    ``after_enqueue`` hook): a delayed message moved to its queue, an actor's ``send``."""

    def __init__(self, client: Publisher) -> None:
        self._client = client

    def after_enqueue(
        self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None
    ) -> None:
        with contextlib.suppress(redis.RedisError):  # only a hint: the next poll finds it
            publish_wake_up(self._client, message.queue_name)


class WakeUpListener:
    """One consumer's subscription to its queue's wake-ups, open from construction on (so a
    consumer that subscribes before its first fetch misses no wake-up)."""

    def __init__(self, client: redis.Redis, queue: str) -> None:
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]
        self._pubsub.subscribe(wake_channel(queue))

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a wake-up; True if one came. A burst of wake-ups counts as
        one (a single fetch answers them all). While Redis is unreachable this sleeps
        ``timeout`` (the consumer polls meanwhile) and the next call reconnects."""
        deadline = time.monotonic() + timeout
        try:
            # None also when what came was a subscription's confirmation: wait on till the deadline
            while self._pubsub.get_message(timeout=max(0.0, deadline - time.monotonic())) is None:
                if time.monotonic() >= deadline:
                    return False
            while self._pubsub.get_message(timeout=0) is not None:
                pass
            return True
        except redis.RedisError:
            time.sleep(max(0.0, deadline - time.monotonic()))
            return False

    def close(self) -> None:
        with contextlib.suppress(redis.RedisError, OSError):
            self._pubsub.close()
