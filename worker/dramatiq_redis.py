"""The worker's Dramatiq broker on Redis, and its consumers, woken instead of polling.

``run_invocations`` messages carry ids only (see :mod:`tether.worker.actors`). Idle consumers are
woken, not polled: every enqueue also publishes a wake-up on the queue's channel (Dramatiq's own
enqueues through the :class:`~tether.worker.wakeups.WakeUpOnEnqueue` middleware, Tether's through
:class:`~tether.worker.enqueuer.AsyncEnqueuer`), and Tether's consumer waits for one between
fetches where Dramatiq's sleeps a growing back-off. A lost wake-up costs at most the idle timeout
(``worker.poll_timeout_ms``), which stays as the fallback poll. A consumer that is full (as many
messages in hand as it may prefetch) waits for an acknowledgement instead, and fetches again as
soon as half its room is free.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

import dramatiq
import redis
from dramatiq.broker import Consumer, MessageProxy
from dramatiq.brokers.redis import RedisBroker
from dramatiq.errors import ConnectionClosed
from dramatiq.middleware import AgeLimit, Callbacks, Pipelines, ShutdownNotifications

from tether.worker.dramatiq_private import unsleeping_consumer
from tether.worker.wakeups import WakeUpListener, WakeUpOnEnqueue

RUN_INVOCATIONS = "run_invocations"
"""The actor whose message carries up to :data:`TOKENS_PER_MESSAGE` tokens: what Tether sends."""
RUN_INVOCATION = "run_invocation"
"""The actor whose message carries one token: what gateways and workers sent before
``run_invocations`` (still taken, so that messages queued across an upgrade are not lost)."""
TOKENS_PER_MESSAGE = 16
"""Most tokens one message carries. A process takes a message's tokens only as far as it has free
slots and sends the rest back (:meth:`tether.worker.host.NodeHost.start_invocations`); this
bounds how much work one process takes from the queue in one message."""


def tokens_in(args: Sequence[Any]) -> list[str]:
    """The invocation ids in the arguments of a ``run_invocations`` or ``run_invocation``
    message."""
    if not args:
        return []
    first = args[0]
    if isinstance(first, list):
        return [str(invocation_id) for invocation_id in first]
    return [str(first)]


def build_broker(redis_url: str, *extra: dramatiq.Middleware) -> RedisBroker:
    """The worker's broker: Dramatiq's default middleware without ``Retries`` and ``TimeLimit``
    (only the reaper makes new attempts, and a run takes as long as it takes), the wake-ups, and
    ``extra``."""
    client = redis.Redis.from_url(redis_url)
    middleware = [
        AgeLimit(),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        WakeUpOnEnqueue(client),
        *extra,
    ]
    return WokenRedisBroker(client=client, middleware=middleware)  # type: ignore[no-untyped-call]


def unreachable(exc: redis.RedisError) -> ConnectionClosed:
    """Redis refused or stopped answering: Dramatiq's connection error, which its consumer thread
    logs as one line and restarts from, where any other exception is logged as an "unexpected
    error" with its traceback, every 3 s per consumer for as long as Redis is gone."""
    return ConnectionClosed(exc)  # type: ignore[no-untyped-call]


class WokenRedisBroker(RedisBroker):
    """Dramatiq's Redis broker whose consumers wait for wake-ups instead of sleeping."""

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> Consumer:
        try:
            wake_ups = WakeUpListener(self.client, queue_name)  # before any fetch: none missed
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise unreachable(exc) from None
        fetcher = unsleeping_consumer(self, queue_name, prefetch)
        return WokenConsumer(fetcher, wake_ups, prefetch=prefetch, idle_wait=timeout / 1000)


class WokenConsumer(Consumer):
    """Wraps a consumer that never sleeps (it fetches, or returns None at once) with the waits:
    for a wake-up when the queue was empty, for an acknowledgement when this consumer is full.

    Dramatiq's consumer thread calls ``__next__``; its worker threads call ``ack`` and ``nack``.
    Returning None (after a wait) gives the consumer thread its turn (delayed messages, stop).
    """

    def __init__(
        self, fetcher: Consumer, wake_ups: WakeUpListener, *, prefetch: int, idle_wait: float
    ) -> None:
        self._fetcher = fetcher
        self._wake_ups = wake_ups
        self._prefetch = prefetch
        self._idle_wait = idle_wait
        self._in_hand: set[str] = set()  # message ids returned and not yet acknowledged
        self._room = threading.Condition()

    def __next__(self) -> MessageProxy | None:
        with self._room:
            full = len(self._in_hand) >= self._prefetch
            if full:
                self._room.wait_for(self._half_free, timeout=self._idle_wait)
        if full:
            return None
        try:
            message = next(self._fetcher)
        except redis.TimeoutError as exc:  # Dramatiq's consumer converts ConnectionError only
            raise unreachable(exc) from None
        if message is None:
            self._wake_ups.wait(self._idle_wait)
            return None
        with self._room:
            self._in_hand.add(message.message_id)
        return message

    def _half_free(self) -> bool:
        return len(self._in_hand) <= self._prefetch // 2

    def ack(self, message: MessageProxy) -> None:
        try:
            self._fetcher.ack(message)
        finally:
            self._release(message)

    def nack(self, message: MessageProxy) -> None:
        try:
            self._fetcher.nack(message)
        finally:
            self._release(message)

    def _release(self, message: MessageProxy) -> None:
        with self._room:
            self._in_hand.discard(message.message_id)
            self._room.notify_all()

    def requeue(self, messages: Iterable[MessageProxy]) -> None:
        self._fetcher.requeue(messages)

    def close(self) -> None:
        try:
            self._wake_ups.close()
        finally:
            self._fetcher.close()
