"""Noticing that a client hung up while its stream, or its sync POST, waits for the run.

aiohttp tells a handler that its client left only when the handler writes (Tether's runner does
not cancel handlers on a hang-up, so an accept is never cut short). A stream waiting on a quiet
run would learn of it only at its next ping, holding its subscription, and counting in
``tether_open_streams``, for up to ``timers.ping_interval`` after its client left; a sync POST
only after ``sync_timeout``. So while one waits, its connection's protocol stands behind a
:class:`HangupWatch` (the transport's public ``set_protocol``): every callback goes on to
aiohttp's protocol unchanged, and a lost connection also tells the subscription CLOSING, which
ends the wait as the process stopping does. Once the wait is over, aiohttp's protocol is put
back, for the next request of a kept-alive connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from functools import partial

from aiohttp import web

from tether.pubsub import CLOSING, Subscription


class HangupWatch(asyncio.Protocol):
    """``inner``'s stand-in: forwards every callback, and calls ``on_hangup`` after
    ``connection_lost``."""

    def __init__(self, inner: asyncio.Protocol, on_hangup: Callable[[], None]) -> None:
        self.inner = inner
        self._on_hangup = on_hangup

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self.inner.connection_lost(exc)
        finally:
            self._on_hangup()

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)  # a pipelined request: aiohttp queues it

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


@contextlib.contextmanager
def watching_hangup(
    transport: asyncio.BaseTransport | None, on_hangup: Callable[[], None]
) -> Iterator[None]:
    """Call ``on_hangup`` when ``transport``'s connection is lost within the block (at once when
    it is already closing). A protocol that is not a plain ``asyncio.Protocol`` is left alone:
    such a stream notices the hang-up at its next write, as without the watch."""
    if transport is None or transport.is_closing():
        on_hangup()
        yield
        return
    inner = transport.get_protocol()
    if not isinstance(inner, asyncio.Protocol):
        yield
        return
    watch = HangupWatch(inner, on_hangup)
    transport.set_protocol(watch)
    try:
        yield
    finally:
        if transport.get_protocol() is watch:
            transport.set_protocol(inner)


def hangup_closes(
    request: web.Request, sub: Subscription
) -> contextlib.AbstractContextManager[None]:
    """Within the block, ``request``'s client hanging up tells ``sub`` CLOSING."""
    return watching_hangup(request.transport, partial(sub.put, CLOSING))
