"""Durable steps, sleeps and waits for input: recorded once, replayed by every later attempt.

A resumed (or replacement) attempt runs the handler from the top. ``ctx.step`` answers from the
record for every step an earlier attempt finished, without calling its function again; resolved
waits return their values; elapsed sleeps return at once. So the code between steps must be
deterministic: the same steps, with the same names, in the same order. Events a handler emits
while it is still replaying recorded work were stored the first time and are not stored again.

A step is the unit of recording: a ``ctx.step`` called while another step's function runs is
part of that step (its function runs, its result is not recorded on its own), and a step's
function may not park (``ctx.wait_for_input``, or a ``ctx.sleep`` past the inline limit). A
replay that returns a step's record never reaches what ran inside it, so a record of its own
would keep the attempt replaying, its later events unstored.

A wait that is not resolved yet *parks* the invocation: its waits become rows, the attempt ends
(no worker slot, no thread, no heartbeat), and :class:`Suspend` unwinds the handler. A client's
input or a due timer queues the invocation again, and the next attempt replays up to the wait.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from tether.jsonvalue import as_stored, dumps, finite_number, json_bytes
from tether.store.errors import Superseded
from tether.store.journal import NewWait, Recorded, Resolution, WaitKind

T = TypeVar("T")
WAIT_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
MAX_STEP_NAME = 256
SLEEP_PREFIX = "sleep#"
"""Names of durable sleeps (``sleep#1``, ``sleep#2``, ...): no step's name starts with it."""
MAX_WAIT_SECONDS = 100 * 365 * 86_400.0
"""The longest durable sleep or wait timeout (a wake-up time must be a date the clock can show)."""

_step_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("step_key", default=None)


class Suspend(BaseException):  # noqa: N818 (a control-flow signal, not an error)
    """The invocation parked: unwinds the handler. A BaseException, so that a handler's
    ``except Exception`` does not swallow it."""


async def ungrouped_parks(call: Awaitable[T]) -> T:
    """``await call`` (a handler), a park that reaches it grouped raised as the one
    ``Suspend``: a wait inside an ``asyncio.TaskGroup`` raises a group of :class:`Suspend`,
    beside the :class:`Superseded` of a second wait whose park the first one's ended."""
    try:
        return await call
    except BaseExceptionGroup as group:
        parks, rest = group.split(Suspend)
        if parks is not None and (rest is None or rest.split(Superseded)[1] is None):
            raise Suspend from None
        raise


class WaitTimeout(Exception):
    """``ctx.wait_for_input`` got no value before its timeout."""

    def __init__(self, wait: str) -> None:
        super().__init__(f"no input for wait {wait!r} before its timeout")
        self.wait = wait


class StepFailed(Exception):
    """A step whose function raised, replayed: the recorded error, by type name only."""

    def __init__(self, step: str, error_type: str) -> None:
        super().__init__(f"step {step!r} failed earlier with {error_type}")
        self.step = step
        self.error_type = error_type


class DurableUsageError(RuntimeError):
    """A durable call the replay rule cannot honour (a name used twice, a bad name)."""


class JournalSink(Protocol):
    """Where one attempt reads and writes its invocation's record (every write fenced)."""

    async def record_step(self, name: str, result: Any, error_type: str | None) -> None: ...

    async def park(self, waits: Sequence[NewWait]) -> None: ...


class Durable:
    """The durable half of one attempt's :class:`tether.InvocationContext`."""

    def __init__(
        self,
        sink: JournalSink,
        invocation_id: str,
        recorded: Recorded,
        *,
        inline_sleep_max: float,
        max_shown_bytes: int = 1024 * 1024,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._sink = sink
        self._invocation_id = invocation_id
        self._recorded = recorded
        self._inline_sleep_max = inline_sleep_max
        self._max_shown_bytes = max_shown_bytes
        self._clock = clock or asyncio.get_running_loop().time
        self._read_at = self._clock()
        self._used: set[str] = set()
        self._sleeps = 0
        self._replays_left = len(recorded.steps) + sum(w.resolved for w in recorded.waits.values())
        self._last_unreached = set(recorded.last)

    def _db_now(self) -> float:
        """The database clock now, as estimated from when the record was read."""
        return self._recorded.now + (self._clock() - self._read_at)

    @property
    def replaying(self) -> bool:
        """True until the handler has reached everything earlier attempts recorded."""
        return self._replays_left > 0

    def recorded(self, name: str) -> bool:
        """True when an earlier attempt finished step ``name`` (this attempt replays it)."""
        return name in self._recorded.steps

    def resolved(self, name: str) -> bool:
        """True when wait ``name`` was parked on by an earlier attempt and has been resolved."""
        record = self._recorded.waits.get(name)
        return record is not None and record.resolved

    @property
    def step_key(self) -> str:
        key = _step_key.get()
        if key is None:
            raise LookupError("ctx.step_key is only set inside a function run by ctx.step")
        return key

    def _claim_name(self, name: str) -> None:
        if name in self._used:
            raise DurableUsageError(f"the name {name!r} is used twice in one run")
        self._used.add(name)

    def _replayed(self, name: str) -> None:
        self._replays_left = max(0, self._replays_left - 1)
        if name in self._last_unreached:
            self._last_unreached.discard(name)
            if not self._last_unreached:  # past the last record: a record before it that this
                self._replays_left = 0  # replay skipped (renamed since) must not hold it back

    def pass_over(self, name: str) -> bool:
        """Count resolved wait ``name`` as replayed without returning its value (a budget wait
        before a model call whose step is recorded: that replay skips the wait); False if no
        such wait was resolved."""
        if not self.resolved(name):
            return False
        self._claim_name(name)
        self._replayed(name)
        return True

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not isinstance(name, str) or not 0 < len(name) <= MAX_STEP_NAME:
            raise DurableUsageError(f"a step name is a string of 1 to {MAX_STEP_NAME} characters")
        dumps(name)  # JSON-safe: no NUL, no lone surrogate
        if name.startswith(SLEEP_PREFIX):
            raise DurableUsageError(
                f"step names starting with {SLEEP_PREFIX!r} are the durable sleeps': {name!r}"
            )
        self._claim_name(name)
        record = self._recorded.steps.get(name)
        if record is not None:  # (inside a step, a record an earlier version made alone)
            self._replayed(name)
            if record.error_type is not None:
                raise StepFailed(name, record.error_type)
            return record.result
        if (outer := _step_key.get()) is not None:  # inside a step: part of it, unrecorded
            token = _step_key.set(f"{outer}/{name}")  # its own key, stable as the outer's
            try:
                return as_stored(await _call(fn, args, kwargs))
            finally:
                _step_key.reset(token)
        token = _step_key.set(f"{self._invocation_id}/{name}")
        try:
            result = await _call(fn, args, kwargs)
        except Exception as exc:
            await self._sink.record_step(name, None, type(exc).__name__)
            raise
        finally:
            _step_key.reset(token)
        stored = as_stored(result)  # what every replay returns, so the first run sees it too
        await self._sink.record_step(name, stored, None)
        return stored

    async def sleep(self, seconds: float) -> None:
        if not finite_number(seconds) or seconds > MAX_WAIT_SECONDS:
            raise DurableUsageError(
                f"a sleep is a finite number of seconds, at most {MAX_WAIT_SECONDS:g}"
            )
        if seconds <= self._inline_sleep_max:
            await asyncio.sleep(max(0.0, seconds))
            return
        self._sleeps += 1
        name = f"{SLEEP_PREFIX}{self._sleeps}"
        self._claim_name(name)
        record = self._recorded.waits.get(name)
        if record is not None and record.resolved:
            self._replayed(name)
            return
        if record is not None and record.wake_at is not None:
            remaining = record.wake_at - self._db_now()
            if remaining <= self._inline_sleep_max:
                await asyncio.sleep(max(0.0, remaining))
                return
        await self._park(NewWait(name, WaitKind.SLEEP, {}, seconds))

    async def wait_for_input(
        self,
        name: str,
        *,
        prompt: Any = None,
        timeout: float | None = None,  # noqa: ASYNC109 (a durable timeout, not an asyncio one)
        details: Mapping[str, Any] | None = None,
    ) -> Any:
        if not isinstance(name, str) or not WAIT_NAME.fullmatch(name):
            raise DurableUsageError("a wait name must match ^[A-Za-z0-9_.:-]{1,128}$")
        if timeout is not None and not (finite_number(timeout) and 0 < timeout <= MAX_WAIT_SECONDS):
            raise DurableUsageError(
                f"a wait's timeout is a number of seconds above 0, at most {MAX_WAIT_SECONDS:g}"
                " (or None)"
            )
        self._claim_name(name)
        record = self._recorded.waits.get(name)
        if record is not None and record.resolved:
            self._replayed(name)
            if record.resolution is Resolution.TIMEOUT:
                raise WaitTimeout(name)
            return record.value
        shown = {**(details or {}), "prompt": prompt}
        size = json_bytes(shown)
        if size > self._max_shown_bytes:  # run.waiting and every status read carry it
            raise DurableUsageError(
                f"wait {name!r}: its prompt and details are {size:,} bytes of JSON, over "
                f"limits.max_event_bytes ({self._max_shown_bytes:,})"
            )
        await self._park(NewWait(name, WaitKind.INPUT, shown, timeout))

    async def _park(self, wait: NewWait) -> None:
        if (key := _step_key.get()) is not None:
            raise DurableUsageError(
                f"{wait.name!r} would park inside step {key.split('/', 1)[1]!r}: a step cannot "
                "wait; wait between steps"
            )
        await self._sink.park([wait])
        raise Suspend


async def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Await an async function; run a sync one on a thread so it cannot stall the loop."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await asyncio.to_thread(fn, *args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result
