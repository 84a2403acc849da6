"""A worker process's concurrency slots, shared by its node's event loop and Dramatiq's threads.

A Dramatiq thread waits for a slot before it hands a token over, so a full process stops taking
messages and leaves them to processes with room; the loop takes slots without waiting (a freed
slot's refill, the periodic claim pass, ``tether dev``'s tokens), and a token that finds no free
slot is dropped: the work it stood for stays queued and is claimed when a slot frees.

``reserve`` of the slots (``worker.reserve``, at most all but one) are kept for tenants with
nothing running: tokens and refills take only the others, and :meth:`try_take_reserved` any, for
a claim that may start only such a tenant's work (:class:`tether.worker.newcomers.NewcomerClaims`),
and :meth:`take_reserved` the reserved ones alone, lent to a tokens' claim that starts only such
work in them. Under another tenant's flood, a tenant's first invocation so starts at once
instead of waiting for a slot.
"""

from __future__ import annotations

import threading


class Slots:
    def __init__(self, count: int, reserve: int = 0) -> None:
        self._count = count
        self._reserve = max(0, min(reserve, count - 1))
        self._free = count
        self._changed = threading.Condition()

    def try_take(self) -> bool:
        """Take a free slot that is not reserved, without waiting."""
        with self._changed:
            if self._free <= self._reserve:
                return False
            self._free -= 1
            return True

    def try_take_reserved(self) -> bool:
        """Take any free slot, reserved or not, without waiting: only for a claim that may
        start nothing but the work of tenants with nothing running."""
        with self._changed:
            if self._free <= 0:
                return False
            self._free -= 1
            return True

    def take_reserved(self, limit: int) -> int:
        """Take up to ``limit`` free slots, only while none is free that tokens may take (so
        they lose nothing), without waiting: only for a claim that starts in them nothing but
        the work of tenants with nothing running. The slots taken."""
        with self._changed:
            if self._free > self._reserve:
                return 0
            taken = min(limit, self._free)
            self._free -= taken
            return taken

    def take(self, timeout: float | None = None) -> bool:
        """Wait for a free slot that is not reserved (a Dramatiq thread, never the loop); False
        past ``timeout``."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._free > self._reserve, timeout):
                return False
            self._free -= 1
            return True

    def give(self) -> bool:
        """Give a slot back; whether it is one tokens may take (not reserved)."""
        with self._changed:
            if self._free >= self._count:
                raise RuntimeError("a slot was given back twice")
            self._free += 1
            unreserved = self._free > self._reserve
            if unreserved:
                self._changed.notify()
            return unreserved

    @property
    def free(self) -> int:
        return self._free

    @property
    def reserve(self) -> int:
        return self._reserve

    @property
    def open_to_tokens(self) -> bool:
        """Whether a slot that is not reserved is free."""
        return self._free > self._reserve
