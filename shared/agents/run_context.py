"""What one run shares across its agent and every sub-agent: events, models, limits, budget,
the record of its steps and the approval policy."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tether import RequestAuth
from tether.agents.approvals import ApprovalPolicy
from tether.agents.definitions import AgentDefinition
from tether.agents.dispatch import Budget
from tether.agents.mcp.hub import McpHub
from tether.agents.metering import ModelMeter, UsageTally
from tether.agents.steps import StepLog, Unrecorded
from tether.agents.types import AgentEvent, Limits, ModelAdapter

Emit = Callable[[AgentEvent], Awaitable[Any]]
ModelFor = Callable[[AgentDefinition], ModelAdapter]


@dataclass
class RunContext:
    """One run. ``thread_id`` is the invocation id in the server (approval ids derive from it);
    ``steps`` is the invocation's record there, and :class:`Unrecorded` in the standalone runner,
    which has no approval gate (``approval.require_for_destructive`` off, as in the reference).
    ``mcp`` reaches the MCP servers; workspace MCP calls go as ``mcp_auth`` when it holds the
    caller."""

    emit: Emit
    model_for: ModelFor
    limits: Limits = field(default_factory=Limits)
    max_event_bytes: int | None = None
    """The largest event ``emit`` stores (the server's ``limits.max_event_bytes``); None: no cap
    (the standalone runner keeps its events in memory)."""
    budget: Budget = field(default_factory=lambda: Budget(Limits().max_tool_calls))
    signal: asyncio.Event | None = None
    with_base_prompt: bool = True
    thread_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    steps: StepLog = field(default_factory=Unrecorded)
    approval: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    attempt: int = 1
    request_auth: RequestAuth | None = None
    """The caller's credentials (``ctx.request_auth``) when an agent of the run runs on them,
    for the tools of those agents (only) that ask for a context."""
    model_headers: Callable[[], Awaitable[dict[str, str]]] | None = None
    """The caller's auth headers, for the model calls of the run's on-behalf-of-user agents
    (only)."""
    mcp: McpHub | None = None
    """Reaches the agents' MCP servers (the registry's pool)."""
    mcp_auth: RequestAuth | None = None
    """The caller's credentials for ``tools/call`` on workspace MCP servers (``ctx.request_auth``
    of any agent that uses them; the service principal's are used without)."""
    meter: ModelMeter = field(default_factory=UsageTally)
    """Checks the budgets before each model turn and takes its usage after it (the
    invocation's context in the server)."""

    @property
    def step_key(self) -> str:
        """Inside a step: its idempotency key (``ctx.step_key``); empty when unrecorded."""
        return str(getattr(self.steps, "step_key", "") or "")

    def aborted(self) -> bool:
        return self.signal is not None and self.signal.is_set()
