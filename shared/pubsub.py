"""Wake-ups between processes: in memory for the embedded mode (here), Redis pub/sub when
distributed (:mod:`tether.pubsub_redis`).

Pub/sub is never the truth. A subscriber that may have missed messages (the Redis connection
dropped) receives :data:`RESYNC` and re-reads what it needs from the store.

Each subscription holds at most ``max_pending_bytes`` of messages its reader has not taken yet.
A reader that falls further behind (a stalled SSE client) loses them all and gets one
:data:`RESYNC` in their place: memory stays bounded and nothing is lost, because a message is
only a wake-up for something already in the store, and the re-read after RESYNC finds it there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sys
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, Protocol, TypeVar, cast

from redis.exceptions import RedisError

from tether.channels import QUEUED_CHANNEL, events_channel, queued_message
from tether.events import Event, decode_batch, encode_batch
from tether.settings import STREAM_BUFFER_BYTES

log = logging.getLogger(__name__)


class _Resync:
    def __repr__(self) -> str:
        return "RESYNC"


class _Closing:
    def __repr__(self) -> str:
        return "CLOSING"


T = TypeVar("T")


class Published(str):
    """One published message as this process's subscribers receive it: the same object for every
    subscription of its channel, so what they make of it (the decoded events, a stream's frame
    bytes) is made once, not once per subscriber. Still a ``str`` for those who want the text."""

    _events: list[Event] | None = None
    _derived: dict[Callable[[list[Event]], Any], Any] | None = None

    def events(self) -> list[Event]:
        """The events of an events-channel message, decoded on first use."""
        if self._events is None:
            self._events = decode_batch(self)
        return self._events

    def derived(self, make: Callable[[list[Event]], T]) -> T:
        """``make(self.events())``, computed by the first caller; ``make`` must be pure."""
        if self._derived is None:
            self._derived = {}
        if make not in self._derived:
            self._derived[make] = make(self.events())
        return cast(T, self._derived[make])


RESYNC: Final = _Resync()
"""Messages may have been lost: re-read the store."""
CLOSING: Final = _Closing()
"""End the stream: the process is shutting down, or the stream's client hung up."""
Message = str | _Resync | _Closing


class Subscription:
    """Messages of one channel, in order, as they arrive, up to ``max_pending_bytes`` untaken.

    A message that would pass the bound, and any RESYNC, replaces everything pending with one
    RESYNC (what it replaces is in the store, which the reader re-reads on RESYNC). CLOSING
    is kept apart and comes first: a closing process ends its streams without draining them.
    """

    def __init__(self, channel: str, max_pending_bytes: int = STREAM_BUFFER_BYTES) -> None:
        self.channel = channel
        self.max_pending_bytes = max_pending_bytes
        self.pending_bytes = 0
        self.overflows = 0
        self._pending: deque[str | _Resync] = deque()
        self._closing = False
        self._waiter: asyncio.Future[None] | None = None
        self._deadline = math.inf
        self._timer: asyncio.TimerHandle | None = None

    def put(self, message: Message) -> None:
        if isinstance(message, _Closing):
            self._closing = True
        elif isinstance(message, _Resync):
            self._resync()
        elif self.pending_bytes + sys.getsizeof(message) > self.max_pending_bytes:
            self.overflows += 1
            self._resync()
        else:
            self._pending.append(message)
            self.pending_bytes += sys.getsizeof(message)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _resync(self) -> None:
        self._pending.clear()
        self._pending.append(RESYNC)
        self.pending_bytes = 0

    async def get(self, timeout: float | None = None) -> Message | None:  # noqa: ASYNC109
        """The next message, or None after ``timeout`` seconds without one."""
        if not (self._pending or self._closing):
            # A bare future, and one timer per subscription that moves its own deadline on: no
            # task per wait (wait_for makes one) and no timer made and cancelled per message,
            # which count when one gateway process wakes thousands of streams a second.
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            self._deadline = math.inf if timeout is None else loop.time() + timeout
            if timeout is not None and (self._timer is None or self._timer.when() > self._deadline):
                if self._timer is not None:
                    self._timer.cancel()  # an earlier deadline than the timer's: rare
                self._timer = loop.call_at(self._deadline, self._expire)
            try:
                await waiter
            finally:
                self._waiter = None
            if not (self._pending or self._closing):
                return None
        if self._closing:
            return CLOSING
        message = self._pending.popleft()
        if isinstance(message, str):
            self.pending_bytes -= sys.getsizeof(message)
        return message

    def _expire(self) -> None:
        """The timer: ends a wait past its deadline, or follows a deadline that moved on."""
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done() or self._deadline == math.inf:
            return  # nobody waits with a timeout: the next such wait sets the timer again
        loop = waiter.get_loop()
        if loop.time() >= self._deadline:
            waiter.set_result(None)
        else:
            self._timer = loop.call_at(self._deadline, self._expire)


class OpenStreams(set[Subscription]):
    """The subscriptions of a process's open streams and waiting sync callers: :meth:`close`
    tells each CLOSING as the process stops, and one added after that is told at once (a request
    already being handled when the process began to stop)."""

    closing = False

    def add(self, sub: Subscription) -> None:
        super().add(sub)
        if self.closing:
            sub.put(CLOSING)

    def close(self) -> None:
        self.closing = True
        for sub in list(self):
            sub.put(CLOSING)


class PubSub(Protocol):
    async def publish(self, channel: str, messages: list[str]) -> None: ...

    def publish_soon(self, channel: str, messages: list[str]) -> None:
        """Publish without waiting (in order with every other publish of this process); a
        failure is logged."""

    def subscribe(self, channel: str) -> contextlib.AbstractAsyncContextManager[Subscription]: ...

    def listened(self, channel: str) -> bool:
        """Whether a message published on ``channel`` now could reach anyone: where only this
        process's subscriptions receive them, whether one is open (so a publisher can skip
        encoding a message nobody would read); where other processes may subscribe, always."""

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


class _Fanout:
    """Channel → live subscriptions, shared by both implementations."""

    def __init__(self) -> None:
        self.subscribers: defaultdict[str, set[Subscription]] = defaultdict(set)

    def deliver(self, channel: str, message: Message) -> None:
        subs = self.subscribers.get(channel)
        if not subs:
            return
        if isinstance(message, str) and not isinstance(message, Published):
            message = Published(message)  # one object for all of them: see Published
        for sub in subs:
            sub.put(message)

    def resync_all(self) -> None:
        for subs in self.subscribers.values():
            for sub in subs:
                sub.put(RESYNC)


class MemoryPubSub(_Fanout):
    """In-process pub/sub for ``tether dev`` and unit tests."""

    def __init__(self, max_pending_bytes: int = STREAM_BUFFER_BYTES) -> None:
        super().__init__()
        self.max_pending_bytes = max_pending_bytes

    async def publish(self, channel: str, messages: list[str]) -> None:
        self.publish_soon(channel, messages)

    def publish_soon(self, channel: str, messages: list[str]) -> None:
        for message in messages:
            self.deliver(channel, message)

    def listened(self, channel: str) -> bool:
        return bool(self.subscribers.get(channel))

    @contextlib.asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[Subscription]:
        sub = Subscription(channel, self.max_pending_bytes)
        self.subscribers[channel].add(sub)
        try:
            yield sub
        finally:
            self._drop(sub)

    def _drop(self, sub: Subscription) -> None:
        subs = self.subscribers.get(sub.channel)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.subscribers[sub.channel]

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        self.subscribers.clear()


async def announce_queued(pubsub: PubSub, tenants: list[str]) -> None:
    """Tell every worker, in one message, that these tenants have new queued work; a failure
    only delays their work until a worker's next scan (:data:`tether.store.candidates.RESCAN`)."""
    if not tenants:
        return
    try:
        await pubsub.publish(QUEUED_CHANNEL, [queued_message(tenants)])
    except (RedisError, OSError) as exc:
        log.warning("queued-work announcement failed (%s)", type(exc).__name__)


def publish_events(pubsub: PubSub, invocation_id: str, batch: list[Event]) -> None:
    """Wake the invocation's readers, without waiting (:meth:`PubSub.publish_soon`): in one
    process the readers have the batch at once; through Redis it joins this process's next
    publish, in order with every other, and a failure is logged and only delays the readers
    (they re-read the store)."""
    channel = events_channel(invocation_id)
    if batch and pubsub.listened(channel):
        pubsub.publish_soon(channel, [encode_batch(batch)])
