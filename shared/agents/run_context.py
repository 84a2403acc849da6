"""What one run shares across its agent and every sub-agent: events, models, limits, budget,
the record of its steps and the approval policy."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tether.agents.approvals import ApprovalPolicy
from tether.agents.definitions import AgentDefinition
from tether.agents.dispatch import Budget
from tether.agents.mcp.hub import McpHub
from tether.agents.steps import StepLog, Unrecorded
from tether.agents.types import AgentEvent, Limits, ModelAdapter

Emit = Callable[[AgentEvent], Awaitable[Any]]
ModelFor = Callable[[AgentDefinition], ModelAdapter]


@dataclass
class RunContext:
    """One run. ``thread_id`` is the invocation id in the server (approval ids derive from it);
    ``steps`` is the invocation's record there, and :class:`Unrecorded` in the standalone runner,
    which has no approval gate (``approval.require_for_destructive`` off, as in the reference).
    ``request_auth`` is the invocation's caller credential (``ctx.request_auth``, possibly
    None): MCP calls to the workspace go as that caller; ``mcp`` reaches the MCP servers."""

    emit: Emit
    model_for: ModelFor
    limits: Limits = field(default_factory=Limits)
    budget: Budget = field(default_factory=lambda: Budget(Limits().max_tool_calls))
    signal: asyncio.Event | None = None
    with_base_prompt: bool = True
    thread_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    steps: StepLog = field(default_factory=Unrecorded)
    approval: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    request_auth: Any = None
    mcp: McpHub | None = None

    def aborted(self) -> bool:
        return self.signal is not None and self.signal.is_set()
