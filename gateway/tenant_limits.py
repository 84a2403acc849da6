"""What one gateway process knows of tenants, read from the store at most once a second: every
tenant's limits (for the accept's rate and max_queued checks) and each tenant's open
invocations (for ``/metrics``). A change made anywhere applies here within a second; a change
made through this process's admin API applies at once (:meth:`LimitsCache.forget`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tether.store.tenants import DEFAULTS, OpenCounts, TenantLimits, Tenants

MAX_AGE = 1.0
"""Seconds a process may act on limits or counts it read earlier."""
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LimitsSnapshot:
    """Every tenant's own limits and the defaults, as read at one moment."""

    own: dict[str, TenantLimits] = field(default_factory=dict)

    def of(self, tenant: str) -> TenantLimits:
        """The limits that apply to ``tenant``: its own, else the defaults, else none."""
        return self.own.get(tenant) or self.own.get(DEFAULTS) or TenantLimits()


class Fresh(Generic[T]):
    """A value read by ``read`` at most ``max_age`` seconds ago; concurrent callers share one
    read."""

    def __init__(
        self,
        read: Callable[[], Awaitable[T]],
        initial: T,
        max_age: float = MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._value = initial
        self._max_age = max_age
        self._clock = clock
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()

    async def value(self) -> T:
        if self._clock() - self._read_at > self._max_age:
            async with self._lock:
                if self._clock() - self._read_at > self._max_age:
                    self._value = await self._read()
                    self._read_at = self._clock()
        return self._value

    def forget(self) -> None:
        """Read again at the next call."""
        self._read_at = float("-inf")


class LimitsCache(Fresh[LimitsSnapshot]):
    """Every tenant's limits: one query a second per process, however many tenants accept."""

    def __init__(self, tenants: Tenants, max_age: float = MAX_AGE) -> None:
        async def read() -> LimitsSnapshot:
            return LimitsSnapshot({row.tenant: row.limits for row in await tenants.rows()})

        super().__init__(read, LimitsSnapshot(), max_age)


class OpenCountsCache(Fresh[dict[str, OpenCounts]]):
    """Each tenant's open invocations (one grouped count), for ``/metrics``."""

    def __init__(self, tenants: Tenants, max_age: float = MAX_AGE) -> None:
        super().__init__(tenants.open_counts, {}, max_age)
