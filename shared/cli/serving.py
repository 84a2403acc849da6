"""How every HTTP process of Tether serves: ``tether dev``, ``tether gateway`` and each of its
``--processes``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from tether.gateway.access_log import AccessLog
from tether.loops import new_loop
from tether.settings import Settings

LISTEN_BACKLOG = 4096
"""Connections the kernel queues for the gateway before it accepts them (the kernel caps it at
``net.core.somaxconn``). A reconnect storm arrives at once: at aiohttp's default of 128 the rest
were dropped and their clients' SYNs retried 1, 3, 7 s later (``docs/performance.md``)."""


def serve(
    web_app: web.Application,
    settings: Settings,
    on_listening: Callable[[str], None] | None = None,
    **where: Any,
) -> None:
    """Serve ``web_app`` until stopped, on ``host``/``port`` or an inherited ``sock``, the way
    every HTTP process of Tether serves: its own event loop, the lean access log unless
    ``settings.access_log`` is off, the listen backlog (an inherited socket keeps the one it was
    given). ``on_listening`` is called once it listens, with the addresses it listens on (the
    port the system chose for port 0)."""
    if "sock" not in where:
        where.setdefault("backlog", LISTEN_BACKLOG)
    if not settings.access_log:
        where["access_log"] = None
    announce = None if on_listening is None else listening_addresses(on_listening)
    web.run_app(web_app, print=announce, loop=new_loop(), access_log_class=AccessLog, **where)


def listening_addresses(then: Callable[[str], None]) -> Callable[[str], None]:
    """aiohttp's ``run_app(print=...)``, which it calls once its sites listen, with a message
    naming their addresses as bound ("======== Running on http://127.0.0.1:43121 ========"):
    ``then`` gets those addresses alone."""

    def announce(message: str) -> None:
        first_line = message.splitlines()[0] if message else ""
        then(first_line.removeprefix("======== Running on ").removesuffix(" ========"))

    return announce
