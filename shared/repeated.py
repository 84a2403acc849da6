"""A warning a loop may repeat on every pass: a store or a server that is down fails each one
(a worker's timer pass runs four times a second). It is logged at once, then at most once every
:data:`REPORT_EVERY` seconds, with how many times it happened since the last line, so an outage
costs a line every few seconds per loop, not a flood (publishes report theirs on the same period:
:class:`tether.pubsub_redis.PublishTrouble`)."""

from __future__ import annotations

import logging
from time import monotonic

REPORT_EVERY = 10.0
"""Seconds between two lines of one repeated warning (the first is logged at once)."""


class Repeated:
    def __init__(self, logger: logging.Logger, every: float = REPORT_EVERY) -> None:
        self._log = logger
        self._every = every
        self._reported_at = float("-inf")
        self._since = 0

    def warning(self, message: str, *args: object) -> None:
        """``logger.warning(message, *args)``, unless a line of this warning went out less than
        ``every`` seconds ago; then it is only counted, for the next line."""
        self._since += 1
        now = monotonic()
        if now - self._reported_at < self._every:
            return
        if self._since > 1:
            message += f" ({self._since} times since the last report)"
        self._log.warning(message, *args)
        self._reported_at = now
        self._since = 0
