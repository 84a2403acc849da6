"""What a handler sees of its invocation: ids, attempt, events, checkpoints, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from tether.budgets import UsageMeter, admit
from tether.durable import Durable, JournalSink
from tether.events import user_event_type
from tether.jsonvalue import dumps, json_bytes
from tether.store.journal import Recorded
from tether.thread import SessionThread
from tether.usage import ModelUsage

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient

T = TypeVar("T")


class AttemptSink(JournalSink, Protocol):
    """Where one attempt's writes go; every write is fenced on the attempt number."""

    async def emit(self, event_type: str, data: Any) -> int: ...

    def last_cursor(self) -> int: ...

    async def save_checkpoint(self, state: Any) -> None: ...

    def checkpoint(self) -> Any: ...


class LimitExceeded(Exception):
    """Raised by ``ctx.emit`` past one of the run's caps (events, or their bytes); nothing was
    written. The invocation fails with ``limit_exceeded`` however the handler then ends, so a
    handler may clean up on it; one still running a grace period later is cancelled."""


class EventBudget(Protocol):
    """The run's caps on its events, charged by every ``emit`` before the event is written."""

    def charge(self, size: int) -> None:
        """Count one event of ``size`` JSON bytes; raise :class:`LimitExceeded` past a cap."""
        ...


class RequestAuth(Protocol):
    """The caller's credentials for this attempt (``tether.credentials.WorkspaceAuth``)."""

    @property
    def user(self) -> str | None:
        """Whose token it is; None when the attempt runs without the user."""
        ...

    @property
    def has_user(self) -> bool: ...

    def client_for(self, who: str) -> WorkspaceClient:
        """A ``databricks.sdk.WorkspaceClient``: ``"user"`` on the caller's token (raises
        ``UserAuthUnavailable`` without one), ``"app"`` on the app's own credentials."""
        ...


class InvocationContext:
    """Handed to ``@app.invoke`` and ``@app.recover`` with the invocation's input."""

    def __init__(
        self,
        *,
        invocation_id: str,
        session_id: str | None,
        attempt: int,
        sink: AttemptSink,
        max_event_bytes: int = 1024 * 1024,
        request_auth: RequestAuth | None = None,
        is_recovery: bool | None = None,
        recorded: Recorded | None = None,
        inline_sleep_max: float = 5.0,
        budget: EventBudget | None = None,
        thread: SessionThread | None = None,
        tenant: str = "",
        usage: UsageMeter | None = None,
    ) -> None:
        self.invocation_id = invocation_id
        self.session_id = session_id
        self.attempt = attempt
        self.request_auth = request_auth
        self.thread = thread
        """The session's conversation (None without a ``session_id``): see ``tether.thread``."""
        self.cancel_requested = asyncio.Event()
        self._is_recovery = attempt > 1 if is_recovery is None else is_recovery
        self._sink = sink
        self._max_event_bytes = max_event_bytes
        self._durable = Durable(
            sink,
            invocation_id,
            recorded or Recorded(),
            inline_sleep_max=inline_sleep_max,
            max_shown_bytes=max_event_bytes,
        )
        self._budget = budget
        self.tenant = tenant
        """Whose caps and budgets the invocation counts against."""
        self._usage = usage

    @property
    def is_recovery(self) -> bool:
        """True for a replacement attempt after a crash (not for one resumed after a wait)."""
        return self._is_recovery

    @property
    def step_key(self) -> str:
        """Inside a function run by :meth:`step`: a key stable per invocation and step name, to
        make the function's external call idempotent (the step may run again after a crash)."""
        return self._durable.step_key

    @overload
    async def step(
        self, name: str, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any
    ) -> T: ...

    @overload
    async def step(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` (async, or sync on a thread) at most once to completion
        per invocation and return its JSON result; later attempts get the recorded result (or
        :class:`tether.StepFailed` for a recorded error) without calling ``fn``. ``name`` is
        unique within a run. A step cut short by a crash runs again."""
        return await self._durable.step(name, fn, *args, **kwargs)

    async def sleep(self, seconds: float) -> None:
        """A durable sleep: short ones sleep here; longer ones park the invocation and a timer
        resumes it, whatever dies in between."""
        await self._durable.sleep(seconds)

    async def wait_for_input(
        self,
        name: str,
        *,
        prompt: Any = None,
        timeout: float | None = None,  # noqa: ASYNC109 (a durable timeout, not an asyncio one)
        details: Mapping[str, Any] | None = None,
    ) -> Any:
        """Park until a client posts a value for wait ``name``
        (``POST /api/invocations/{id}/input``) and return it; raises
        :class:`tether.WaitTimeout` after ``timeout`` seconds. ``prompt`` and ``details`` are
        shown to clients in ``waiting_for``."""
        return await self._durable.wait_for_input(
            name, prompt=prompt, timeout=timeout, details=details
        )

    @property
    def max_event_bytes(self) -> int:
        """The largest event :meth:`emit` takes, in JSON bytes (``limits.max_event_bytes``)."""
        return self._max_event_bytes

    async def emit(self, event: Mapping[str, Any]) -> int:
        """Append an event to the invocation's log and return its cursor.

        The event is a JSON object whose ``type`` matches ``^[A-Za-z0-9_.:-]{1,64}$`` and does not
        start with ``run.``. Raises ``InvalidEvent`` or ``InvalidJson`` on a bad event, and
        :class:`LimitExceeded` past the run's caps on its events.
        """
        event_type = user_event_type(event)
        data = dict(event)
        size = json_bytes(data)
        if size > self._max_event_bytes:
            raise ValueError(f"event is larger than {self._max_event_bytes} bytes")
        if self._durable.replaying:  # stored by the attempt that first ran this far
            return self._sink.last_cursor()
        if self._budget is not None:
            self._budget.charge(size)
        return await self._sink.emit(event_type, data)

    async def admit_model_call(self, step: str) -> None:
        """Call before the model call that step ``step`` makes (before ``ctx.step(step, ...)``):
        returns when the tenant's token and cost budgets allow the call, or at once when the
        step is recorded (a replay spends nothing). Past a budget it raises
        :class:`tether.BudgetExceeded` (the invocation fails with ``budget_exceeded``), or
        parks the invocation when the tenant's ``on_budget`` is ``park`` (see
        ``tether.budgets``)."""
        if self._usage is not None:
            await admit(self._durable, self._usage, self.invocation_id, step)

    async def record_model_usage(self, usage: ModelUsage) -> None:
        """Add one model call's usage to the invocation and to its tenant's current budget
        period. Call it inside the step that made the call, once the call has ended: a replay
        does not run the step, so a recorded call is never counted twice."""
        if self._usage is not None:
            await self._usage.record(usage)

    def load_checkpoint(self) -> Any:
        """The state last saved by ``save_checkpoint`` (by any attempt), or None."""
        return self._sink.checkpoint()

    async def save_checkpoint(self, state: Any) -> None:
        """Durably save a JSON state that a replacement attempt can resume from."""
        dumps(state)
        await self._sink.save_checkpoint(state)
