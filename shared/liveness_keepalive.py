"""The TCP keepalive of each worker's liveness connection, derived from ``timers.stale_after``;
and so the largest ``stale_after`` the kernel accepts one for.

The connection (:func:`tether.worker.liveness.liveness_url`) must notice a silently dead peer
within ``stale_after / 2``: it idles ``idle`` seconds, then probes once a second ``count``
times. Linux refuses a probe count above 127 (``TCP_KEEPCNT``) and an idle time above 32,767 s
(``TCP_KEEPIDLE``): the connection then fails to open, and crash detection through the session
is off. So the count stops at 127 (a longer ``stale_after`` idles longer), and ``stale_after`` is
bounded here, where both are computed, rather than by a number copied elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_KEEPALIVE_COUNT = 127
"""Linux's ``MAX_TCP_KEEPCNT``: the most probes ``TCP_KEEPCNT`` accepts."""
MAX_KEEPALIVE_IDLE = 32_767
"""Linux's ``MAX_TCP_KEEPIDLE``: the longest idle time ``TCP_KEEPIDLE`` accepts, in seconds."""
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
    count = min(MAX_KEEPALIVE_COUNT, max(1, int(within) - max(1, int(within / 2))))
    return Keepalive(within=within, idle=max(1, int(within) - count), count=count)


MAX_STALE_AFTER = 2.0 * (MAX_KEEPALIVE_IDLE + MAX_KEEPALIVE_COUNT)
"""The largest ``stale_after`` whose keepalive the kernel accepts (65,788 s, over 18 hours): past
254 s the probes stop at 127 and the idle time grows, up to its own limit."""
