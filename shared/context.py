"""What a handler sees of its invocation: ids, attempt, events, checkpoints, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from tether.events import user_event_type
from tether.jsonvalue import dumps

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient


class AttemptSink(Protocol):
    """Where one attempt's writes go; every write is fenced on the attempt number."""

    async def emit(self, event_type: str, data: Any) -> int: ...

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
    def client_for(self, who: str) -> WorkspaceClient: ...


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
        budget: EventBudget | None = None,
    ) -> None:
        self.invocation_id = invocation_id
        self.session_id = session_id
        self.attempt = attempt
        self.request_auth = request_auth
        self.cancel_requested = asyncio.Event()
        self._sink = sink
        self._max_event_bytes = max_event_bytes
        self._budget = budget

    @property
    def is_recovery(self) -> bool:
        """True for a replacement attempt after a crash."""
        return self.attempt > 1

    async def emit(self, event: Mapping[str, Any]) -> int:
        """Append an event to the invocation's log and return its cursor.

        The event is a JSON object whose ``type`` matches ``^[A-Za-z0-9_.:-]{1,64}$`` and does not
        start with ``run.``. Raises ``InvalidEvent`` or ``InvalidJson`` on a bad event, and
        :class:`LimitExceeded` past the run's caps on its events.
        """
        event_type = user_event_type(event)
        data = dict(event)
        size = len(dumps(data).encode())
        if size > self._max_event_bytes:
            raise ValueError(f"event is larger than {self._max_event_bytes} bytes")
        if self._budget is not None:
            self._budget.charge(size)
        return await self._sink.emit(event_type, data)

    def load_checkpoint(self) -> Any:
        """The state last saved by ``save_checkpoint`` (by any attempt), or None."""
        return self._sink.checkpoint()

    async def save_checkpoint(self, state: Any) -> None:
        """Durably save a JSON state that a replacement attempt can resume from."""
        dumps(state)
        await self._sink.save_checkpoint(state)
