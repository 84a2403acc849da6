"""Group commit: concurrent requests for the same kind of write go to the database (or Redis)
together, as one batch, instead of one round trip each.

The first request starts a flush at once (no timer, so a lone request waits for nothing extra);
requests that arrive while a flush is in flight wait and go together in the next one, so batches
grow by themselves exactly when the system is busy.

That needs the loop to run while a flush is in flight. A flush that holds the loop's thread
(the embedded store's transactions run on it) lets nothing arrive meanwhile, so such a flush may
first let the loop take a few turns (``gather_turns``): what the loop's other callbacks submit
in those turns joins the batch. Idle, a turn takes microseconds; busy, each turn runs every
callback that is ready (requests read and parsed, attempts ended).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

Item = TypeVar("Item")
Result = TypeVar("Result")
Flush = Callable[[list[Item]], Awaitable[Sequence[Result | BaseException]]]


class GroupCommit(Generic[Item, Result]):
    """``await submit(item)`` returns that item's result (or raises its exception).

    ``flush(items)`` returns one result or exception per item, in order; if it raises, every item
    of the batch gets that exception. At most ``max_batch`` items go in one flush, and at most
    ``in_flight`` flushes run at once (1 keeps batches in submission order). A submit that
    starts a flush (rather than waiting for the one in flight) has it let the loop take
    ``gather_turns`` turns first. With ``stalled_after``, a flush that has run that many seconds
    no longer holds its place: when every flush in flight has, a submit starts another, up to
    ``most_in_flight`` (one stuck statement does not hold back every later item).
    """

    def __init__(
        self,
        flush: Flush[Item, Result],
        *,
        max_batch: int = 256,
        in_flight: int = 1,
        gather_turns: int = 0,
        stalled_after: float | None = None,
        most_in_flight: int | None = None,
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._in_flight = in_flight
        self._gather_turns = gather_turns
        self._stalled_after = stalled_after
        self._most_in_flight = max(in_flight, most_in_flight or in_flight)
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._runners: set[asyncio.Task[None]] = set()
        self._flushing: dict[asyncio.Task[None], float] = {}
        """Each runner's flush in progress: when it began (loop time)."""

    async def submit(self, item: Item) -> Result:
        return await self.submit_nowait(item)

    def submit_nowait(self, item: Item) -> asyncio.Future[Result]:
        """Queue ``item`` for the next flush without waiting: its future has the result. A
        caller that must not wait (or start a task of its own to wait) gets its item into the
        very next batch, one loop step sooner. Cancelling the future skips the result, not the
        write."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        self._pending.append((item, future))
        self._runners = {runner for runner in self._runners if not runner.done()}
        if len(self._runners) < self._in_flight or self._all_stalled(loop):
            self._runners.add(asyncio.create_task(self._run(), name="group-commit"))
        return future

    def _all_stalled(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether another flush may start beside the ones in flight: each has run over
        ``stalled_after`` s, and there is room under ``most_in_flight``."""
        if self._stalled_after is None or len(self._runners) >= self._most_in_flight:
            return False
        now, began = loop.time(), [self._flushing.get(runner) for runner in self._runners]
        return all(at is not None and now - at >= self._stalled_after for at in began)

    @property
    def pending(self) -> int:
        """How many items wait for the next flush (it starts when the one in flight ends)."""
        return len(self._pending)

    async def idle(self) -> None:
        """Wait until no flush runs (one started meanwhile is waited for too)."""
        while runners := [runner for runner in self._runners if not runner.done()]:
            await asyncio.gather(*runners, return_exceptions=True)

    async def _run(self) -> None:
        try:
            for _ in range(self._gather_turns):
                await asyncio.sleep(0)
        except BaseException as exc:  # cancelled while gathering: nothing was flushed
            self._fail_waiting([], exc)
            raise
        me = asyncio.current_task() if self._stalled_after is not None else None
        while self._pending:
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            if me is not None:  # only a group that lets stalled flushes be overtaken times them
                self._flushing[me] = asyncio.get_running_loop().time()
            try:
                results: Sequence[Result | BaseException] = await self._flush([i for i, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(
                        f"flush returned {len(results)} results for {len(batch)} items"
                    )
            except Exception as exc:
                results = [exc] * len(batch)
            except BaseException as exc:  # cancelled: fail this batch and everything waiting
                self._fail_waiting(batch, exc)
                raise
            finally:
                if me is not None:
                    del self._flushing[me]
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():  # the caller gave up (its request was cancelled)
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    def _fail_waiting(
        self, batch: list[tuple[Item, asyncio.Future[Result]]], exc: BaseException
    ) -> None:
        for _, future in batch + self._pending:
            if not future.done():
                future.set_exception(exc)
        self._pending.clear()
