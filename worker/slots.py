"""A worker process's concurrency slots, shared by its node's event loop and Dramatiq's threads.

A Dramatiq thread waits for a slot before it hands a token over, so a full process stops taking
messages and leaves them to processes with room; the loop takes slots without waiting (a freed
slot's refill, the periodic claim pass, ``tether dev``'s tokens), and a token that finds no free
slot is dropped: the work it stood for stays queued and is claimed when a slot frees.
"""

from __future__ import annotations

import threading


class Slots:
    def __init__(self, count: int) -> None:
        self._count = count
        self._free = count
        self._changed = threading.Condition()

    def try_take(self) -> bool:
        """Take a free slot if there is one, without waiting."""
        with self._changed:
            if self._free <= 0:
                return False
            self._free -= 1
            return True

    def take(self, timeout: float | None = None) -> bool:
        """Wait for a free slot (a Dramatiq thread, never the loop); False past ``timeout``."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._free > 0, timeout):
                return False
            self._free -= 1
            return True

    def give(self) -> None:
        with self._changed:
            if self._free >= self._count:
                raise RuntimeError("a slot was given back twice")
            self._free += 1
            self._changed.notify()

    @property
    def free(self) -> int:
        return self._free
