"""The TCP keepalive of each worker's liveness connection, derived from ``timers.stale_after``;
and so the largest ``stale_after`` the kernel accepts one for.

The connection (:func:`tether.worker.liveness.liveness_url`) must notice a silently dead peer
within ``stale_after / 2``: it idles ``idle`` seconds, then probes once a second ``count``
times. Linux refuses a probe count above 127 (``TCP_KEEPCNT``: the connection then fails to open,
and crash detection through the session is off), so ``stale_after`` is bounded here, where the
count is computed, rather than by a number copied elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_KEEPALIVE_COUNT = 127
"""Linux's ``MAX_TCP_KEEPCNT``: the most probes ``TCP_KEEPCNT`` accepts."""
PROBE_INTERVAL = 1


@dataclass(frozen=True, slots=True)
class Keepalive:
    """How a liveness connection finds its peer dead, in whole seconds as libpq takes them."""

    within: float
    """Notice a dead connection within this: ``stale_after / 2``."""
    idle: int
    """Seconds of silence before the first probe."""
    count: int
    """Probes, ``PROBE_INTERVAL`` apart, before the connection is dropped."""

    @property
    def within_ms(self) -> int:
        return max(1, int(self.within * 1000))

    @property
    def connect_timeout(self) -> int:
        return max(2, math.ceil(self.within))


def keepalive_for(stale_after: float) -> Keepalive:
    within = stale_after / 2
    idle = max(1, int(within / 2))
    return Keepalive(within=within, idle=idle, count=max(1, int(within) - idle))


MAX_STALE_AFTER = 4.0 * MAX_KEEPALIVE_COUNT
"""The largest ``stale_after`` whose probe count the kernel accepts: for ``stale_after`` = 4q + r
(0 <= r < 4) the count is int(2q + r/2) - int(q + r/4) = q + int(r/2), which is at most 127 up
to 4 * 127 = 508 s and reaches 128 at 510 s."""
