"""The embedded mode's transport: a message is a task on the node's own loop (no broker).

As in the distributed mode a message is a token (:meth:`Runtime.start`); one that finds no free
slot is dropped, and a slot that frees claims the next fair invocation."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from tether.worker.runtime import Runtime

log = logging.getLogger(__name__)


class LocalQueue:
    """A token as a task on this loop; until a runtime is attached (or after close),
    messages are dropped and the reaper re-sends them, as after a lost Redis message."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None
        self._tasks: set[asyncio.Task[bool]] = set()
        self._timers: set[asyncio.TimerHandle] = set()

    async def send(self, invocation_ids: Sequence[str], delay: float) -> None:
        loop = asyncio.get_running_loop()
        for invocation_id in invocation_ids:
            if delay > 0:
                self._forget_fired(loop)
                self._timers.add(loop.call_later(delay, self._start, invocation_id))
            else:
                self._start(invocation_id)

    async def waiting(self) -> int:
        """Messages not yet handed to the runtime: delayed, or their task not yet done."""
        self._forget_fired(asyncio.get_running_loop())
        return len(self._timers) + len(self._tasks)

    def _forget_fired(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        self._timers = {h for h in self._timers if h.when() > now and not h.cancelled()}

    def _start(self, invocation_id: str) -> None:
        if self.runtime is None:
            return
        task = asyncio.create_task(self.runtime.start(invocation_id))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[bool]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("starting an invocation failed (%s)", type(task.exception()).__name__)

    async def close(self) -> None:
        self.runtime = None
        for handle in self._timers:
            handle.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
