"""The event loop every Tether process runs on, its heap once started, and the jitter of its
periodic passes.

The loop: uvloop's where it is installed (the default on Linux and macOS), else asyncio's own.

uvloop runs the same asyncio programs with its I/O, timers and callbacks in C (libuv): each
wake-up of a busy loop costs less, so a worker finishing hundreds of invocations a second answers
an announcement sooner, and a gateway accepts more per core (``docs/performance-history.md``).
``TETHER_EVENT_LOOP=asyncio`` chooses asyncio's loop (to rule the loop out when chasing a bug).

The heap: once a process serves, :func:`settle_heap` moves what starting it made (modules, the
app, compiled statements: ~100,000 objects) out of the garbage collector's reach, so a full
collection walks only what serving made: in a worker finishing ~250 invocations a second, the
pauses of a full collection went from ~38 ms to ~2.4 ms.

The jitter: a periodic pass (a worker's reaper, timers, broker check) waits :func:`jittered`
periods, ± :data:`PASS_JITTER`, so that processes started together do not query in step.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
ENV = "TETHER_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")
PASS_JITTER = 0.2
"""A process's periodic passes (a worker's reaper, timers and broker check, the reaper's own
periods) come every period ± this share of it, so that processes started together do not query
in step."""


class UnknownLoop(ValueError):
    """``TETHER_EVENT_LOOP`` names no loop Tether runs on."""


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """How to make this process's loops: ``TETHER_EVENT_LOOP`` (``uvloop``, the default, or
    ``asyncio``); uvloop falls back to asyncio's loop where it is not installed."""
    chosen = os.environ.get(ENV, "uvloop").strip().lower() or "uvloop"
    if chosen not in CHOICES:
        raise UnknownLoop(f"{ENV} must be one of {', '.join(CHOICES)}, not {chosen!r}")
    if chosen == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.debug("uvloop is not installed: asyncio's event loop")
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def new_loop() -> asyncio.AbstractEventLoop:
    """A new event loop of this process's kind (:func:`loop_factory`)."""
    return loop_factory()()


CANCEL_AGAIN_AFTER = 0.1
"""Seconds :func:`cancel_and_wait` gives a task to end before cancelling it again."""


def cancel_while(
    task: asyncio.Task[Any], due: Callable[[], bool], ready: Callable[[], bool] = lambda: True
) -> None:
    """For as long as ``task`` runs and ``due()`` holds, cancel it whenever ``ready()`` holds:
    now, and again each :data:`CANCEL_AGAIN_AFTER` seconds (the lost cancel of
    :func:`cancel_and_wait`, for a task that is not awaited here: a handler a stop must reach,
    which cleans up quickly or under ``asyncio.shield``, and which may be in a step no cancel
    may cut, such as parking)."""

    def again() -> None:
        if task.done() or not due():
            return
        if ready():
            task.cancel()
        loop.call_later(CANCEL_AGAIN_AFTER, again)

    loop = asyncio.get_running_loop()
    again()


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until every one has ended, cancelling again each
    :data:`CANCEL_AGAIN_AFTER` seconds those still running.

    One ``cancel()`` is not enough for a loop that runs forever on Python 3.11: its
    ``asyncio.wait_for`` drops a cancel that arrives in the loop step where the awaited
    operation completes, and returns that result instead. redis-py sends every command of an
    async client under ``wait_for`` (its ``socket_timeout``), so a background loop calling
    Redis (the reaper, the broker watch, a pub/sub reader) could lose the one cancel it got and
    run on, and whatever awaited it waited forever. Exceptions of the tasks are not raised."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=CANCEL_AGAIN_AFTER)
    for task in tasks:  # retrieved, as gather(return_exceptions=True) would: none goes unseen
        if not task.cancelled():
            task.exception()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on this process's kind of loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def settle_heap() -> None:
    """Collect once, then freeze the survivors (``gc.freeze``): call it when a process has
    started and before it serves."""
    gc.collect()
    gc.freeze()


def jittered(period: float) -> float:
    """``period`` ± :data:`PASS_JITTER` of it, at random: the wait before a periodic pass."""
    return period * random.uniform(1 - PASS_JITTER, 1 + PASS_JITTER)
