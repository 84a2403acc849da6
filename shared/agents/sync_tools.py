"""Where sync tools run: each call on a daemon thread of its own, at most ``MAX_RUNNING`` at once.

A thread cannot be stopped, so a sync tool past its timeout keeps running until it returns
(:mod:`tether.agents.dispatch` tells the model so). On asyncio's shared executor such calls
would hold its few threads (``min(32, CPUs + 4)``): every later ``asyncio.to_thread`` of the
process, other runs' tools and steps included, would queue behind them, their timeouts spent
waiting, and the process could not exit until they returned. Here a stuck call holds one daemon
thread, nothing queues behind it, a call past the bound is refused at once with a reason, and
the process exits without waiting for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any

from tether.agents.errors import ToolError

MAX_RUNNING = 64
"""Sync tool calls running at once in one process (those past their timeouts included)."""


class SyncToolThreads:
    def __init__(self, limit: int = MAX_RUNNING) -> None:
        self.limit = limit
        self._running = 0
        self._lock = threading.Lock()

    @property
    def running(self) -> int:
        return self._running

    async def run(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on a thread of its own, in the caller's context; raises
        :class:`ToolError` when ``limit`` calls are still running."""
        with self._lock:
            if self._running >= self.limit:
                raise ToolError(
                    f"Tool '{name}' could not start: {self.limit} sync tool calls are still "
                    "running in this process (a sync tool past its timeout keeps its thread "
                    "until it returns)."
                )
            self._running += 1
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        context = contextvars.copy_context()

        def work() -> None:
            result: Any = None
            error: BaseException | None = None
            try:
                result = context.run(fn, *args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 (handed to the awaiting task, whatever it is)
                error = exc
            # The slot is free before the caller hears back, so a call it makes next can start.
            with self._lock:
                self._running -= 1
            _hand_over(loop, done, result=result, exc=error)

        threading.Thread(target=work, name=f"tether-tool-{name}", daemon=True).start()
        return await done


def _hand_over(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[Any],
    *,
    result: Any = None,
    exc: BaseException | None = None,
) -> None:
    def settle() -> None:
        if done.done():  # the caller stopped waiting (its timeout): the result is dropped
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result)

    with contextlib.suppress(RuntimeError):  # the loop closed while the tool ran
        loop.call_soon_threadsafe(settle)


SYNC_TOOLS = SyncToolThreads()
"""The process's sync tool threads."""
