"""In-memory stand-ins for an attempt's journal, for unit tests of the handler API, and what
tests that drive a worker runtime by hand share."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tether.store.journal import (
    NewWait,
    Recorded,
    Resolution,
    StepRecord,
    WaitRecord,
    made_last,
)
from tether.store.store import Store

if TYPE_CHECKING:
    from tether.worker.runtime import Runtime


S = TypeVar("S", bound=Store)


@contextlib.asynccontextmanager
async def embedded_store(kind: type[S], tmp_path: Path) -> AsyncIterator[S]:
    """A ``kind`` (the embedded store or a subclass of it) on a fresh SQLite file, migrated."""
    s = kind.embedded(str(tmp_path / "tether.db"))
    assert isinstance(s, kind)
    await s.migrate()
    try:
        yield s
    finally:
        await s.close()


async def run_to_end(runtime: Runtime, *invocation_ids: str, within: float = 10) -> None:
    """Wait for these invocations' attempts (all running ones if none are named), then for what
    their ends set off (a freed slot's claim, group commits): nothing may still hold one of the
    store's connections when the test closes it."""
    running = [runtime.attempts[i] for i in invocation_ids] or list(runtime.attempts.values())
    tasks = [attempt.task for attempt in running if attempt.task is not None]
    await asyncio.wait_for(asyncio.gather(*tasks), within)
    await runtime.settled()


class MemoryJournal:
    """The journal half of the AttemptSink seam: steps and waits in memory, kept across the
    attempts of one test 'invocation'; :meth:`recorded` is what the next attempt replays."""

    def __init__(self) -> None:
        self.steps: dict[str, StepRecord] = {}
        self.waits: dict[str, WaitRecord] = {}
        self.parks: list[list[NewWait]] = []
        self.cursor = 0
        self.now = 1_000.0
        self.made: dict[str, float] = {}  # when each step or wait was recorded (a record count)

    def last_cursor(self) -> int:
        return self.cursor

    async def record_step(self, name: str, result: Any, error_type: str | None) -> None:
        self.steps.setdefault(name, StepRecord(name, result, error_type))
        self.made.setdefault(name, len(self.made))

    async def park(self, waits: Sequence[NewWait]) -> None:
        self.parks.append(list(waits))
        for wait in waits:
            wake_at = None if wait.wake_in is None else self.now + wait.wake_in
            self.waits.setdefault(
                wait.name, WaitRecord(wait.name, wait.kind, wait.details, wake_at, None, None)
            )
            self.made.setdefault(wait.name, len(self.made))

    def resolve(self, name: str, value: Any = None, how: Resolution = Resolution.INPUT) -> None:
        old = self.waits[name]
        self.waits[name] = WaitRecord(name, old.kind, old.details, old.wake_at, value, how)

    def recorded(self) -> Recorded:
        replayable = [*self.steps, *(w.name for w in self.waits.values() if w.resolved)]
        last = made_last([(name, self.made.get(name, -1.0)) for name in replayable])
        return Recorded(dict(self.steps), dict(self.waits), self.now, last)


class NoQueue:
    """A queue transport that sends nothing: for a runtime whose claims the test drives."""

    async def send(self, invocation_ids: Sequence[str], delay: float) -> None:
        return None

    async def waiting(self) -> int:
        return 0

    async def close(self) -> None:
        return None
