"""The human-in-the-loop approval gate (spec §4.7), made durable.

A tool whose effect is ``write``, ``update`` or ``destructive`` (or annotated ``destructive:
true``) waits for a human before it runs, when the policy's ``require_for_destructive`` is on
(the default). Waiting parks the invocation on ``ctx.wait_for_input`` under a deterministic
``approval_id``, so it holds no worker, survives restarts, and a resumed attempt waits on (and
replays) the same wait. The decision is the wait's value: only ``{"decision": "approve"}``
approves; ``{"decision": "deny"}``, any other value, and no answer before the timeout all deny.
A denied call is not an error: the model reads :func:`denial_text` as the tool's result.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tether import MAX_WAIT_SECONDS, WaitTimeout
from tether.agents.types import AgentEvent, ToolAnnotations
from tether.jsonvalue import finite_number

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 3600.0
MIN_TIMEOUT_S = 1.0
PENDING = "approval.pending"
RESOLVED = "approval.resolved"
APPROVE = "approve"
DENY = "deny"
Reason = Literal["user", "timeout", "invalid_decision", "not_asked"]


def requires_approval(annotations: ToolAnnotations | None) -> bool:
    """True for write, update and destructive effects, and for the legacy ``destructive: true``."""
    if annotations is None:
        return False
    return annotations.destructive is True or annotations.effect in (
        "write",
        "update",
        "destructive",
    )


def checked_timeout(value: Any, where: str) -> float | None:
    """A usable approval timeout in seconds, or None (use the default) with a warning when the
    value is not a finite number of at least one second (spec §4.6: replaced, not clamped).
    Longer than a durable wait may be (``MAX_WAIT_SECONDS``, 100 years) is that, with a
    warning: the wait would refuse it, failing the run at its first gated call."""
    if value is None:
        return None
    if finite_number(value) and value > MAX_WAIT_SECONDS:
        log.warning(
            "%s: approval timeout %r is longer than a durable wait may be; using %g",
            where,
            value,
            MAX_WAIT_SECONDS,
        )
        return MAX_WAIT_SECONDS
    if finite_number(value) and value >= MIN_TIMEOUT_S:
        return float(value)
    log.warning(
        "%s: approval timeout %r is not a finite number of seconds >= %g; using the default",
        where,
        value,
        MIN_TIMEOUT_S,
    )
    return None


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """Run-wide approval settings. An agent may set its own timeout (``approval_timeout_s`` in
    code, ``approval: {timeout: …}`` in front matter); whether the gate is on is run-wide."""

    require_for_destructive: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S
    ask: bool = True
    """False: a gated call is denied at once (reason ``not_asked``), for a run nobody can be
    asked in (``/api/agents/invocations`` does not stream; an MCP tool's effect is known only
    when the run lists the server's tools)."""

    def __post_init__(self) -> None:
        timeout = checked_timeout(self.timeout_s, "ApprovalPolicy")
        object.__setattr__(self, "timeout_s", DEFAULT_TIMEOUT_S if timeout is None else timeout)

    def gates(self, annotations: ToolAnnotations | None) -> bool:
        """Whether a tool with these annotations must be approved before it runs."""
        return self.require_for_destructive and requires_approval(annotations)


def approval_id(invocation_id: str, call_step: str) -> str:
    """The same id for the same tool call of the same invocation, on every attempt."""
    digest = hashlib.sha256(f"{invocation_id}\n{call_step}".encode()).hexdigest()
    return f"approval-{digest[:32]}"


def denial_text(tool_name: str) -> str:
    """What the model reads as a denied tool's result (spec §4.5, verbatim)."""
    return f"Tool execution denied by user approval gate (tool: {tool_name})."


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One tool call held for a decision; ``agent_path`` runs from the top-level agent down to
    ``agent``, the one whose tool it is."""

    approval_id: str
    call_id: str
    tool_name: str
    args: Any
    annotations: ToolAnnotations | None
    agent_path: tuple[str, ...]
    timeout_s: float

    @property
    def agent(self) -> str:
        return self.agent_path[-1]

    def details(self) -> dict[str, Any]:
        """What clients see: in ``approval.pending`` and in the wait's ``waiting_for`` entry."""
        return {
            "approval_id": self.approval_id,
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "args": self.args,
            "annotations": self.annotations.to_json() if self.annotations else {},
            "agent": self.agent,
            "agent_path": list(self.agent_path),
        }

    def prompt(self) -> str:
        effect = (self.annotations.effect if self.annotations else None) or "destructive"
        return f"Agent '{self.agent}' wants to run '{self.tool_name}' ({effect}). Approve or deny."


@dataclass(frozen=True, slots=True)
class Decision:
    approved: bool
    reason: Reason

    @property
    def word(self) -> str:
        return APPROVE if self.approved else DENY


def decision_from(value: Any) -> Decision:
    """Only ``{"decision": "approve"}`` (other keys ignored) approves; ``"deny"`` denies; any
    other value is a deny with reason ``invalid_decision``, never an approval."""
    choice = value.get("decision") if isinstance(value, Mapping) else None
    if choice == APPROVE:
        return Decision(True, "user")
    if choice == DENY:
        return Decision(False, "user")
    return Decision(False, "invalid_decision")


class Waits(Protocol):
    """The durable wait the gate parks on (``InvocationContext.wait_for_input``)."""

    async def wait_for_input(
        self,
        name: str,
        *,
        prompt: Any = None,
        timeout: float | None = None,  # noqa: ASYNC109 (a durable timeout)
        details: Mapping[str, Any] | None = None,
    ) -> Any: ...


@dataclass
class ApprovalGate:
    """Asks for, waits for and announces one decision per gated tool call."""

    waits: Waits
    emit: Callable[[AgentEvent], Awaitable[Any]]
    policy: ApprovalPolicy = field(default_factory=ApprovalPolicy)

    async def decide(self, request: ApprovalRequest) -> Decision:
        if self.policy.ask:
            decision = await self._asked(request)
        else:
            decision = Decision(False, "not_asked")
        await self.emit(
            {
                "type": RESOLVED,
                "approval_id": request.approval_id,
                "call_id": request.call_id,
                "tool_name": request.tool_name,
                "agent": request.agent,
                "decision": decision.word,
                "reason": decision.reason,
            }
        )
        return decision

    async def _asked(self, request: ApprovalRequest) -> Decision:
        await self.emit({"type": PENDING, **request.details()})
        try:
            value = await self.waits.wait_for_input(
                request.approval_id,
                prompt=request.prompt(),
                timeout=request.timeout_s,
                details=request.details(),
            )
        except WaitTimeout:
            return Decision(False, "timeout")
        return decision_from(value)
