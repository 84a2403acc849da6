"""What each model call of an agent run used, and the budget check before it.

In the server the meter is the invocation's context (``ctx.admit_model_call`` and
``ctx.record_model_usage``): the tenant's budgets are checked before every model turn that is
not replayed, and each turn's usage is added once it ends, inside the turn's step (so a replay
never counts it again). The standalone runner only adds it up (:class:`UsageTally`).

A model that reports no usage is estimated from the text (``tether.usage.estimate``: a token
per 4 characters of the messages and tool definitions sent, and of the text and tool-call
arguments received), and the usage says ``estimated``. Cost comes from the agent's ``price``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tether import ModelPrice, ModelUsage
from tether.agents.types import AgentInput, TurnOutcome
from tether.jsonvalue import dumps
from tether.usage import UsageTotals, estimate


class ModelMeter(Protocol):
    """Where a run's budget checks and model usage go (``InvocationContext`` in the server)."""

    async def admit_model_call(self, step: str) -> None: ...

    async def record_model_usage(self, usage: ModelUsage) -> None: ...


@dataclass
class UsageTally:
    """A :class:`ModelMeter` without budgets that adds the usage up (the standalone runner)."""

    totals: UsageTotals = field(default_factory=UsageTotals)

    async def admit_model_call(self, step: str) -> None:
        return None

    async def record_model_usage(self, usage: ModelUsage) -> None:
        self.totals = self.totals.plus(usage)


def prompt_chars(request: AgentInput) -> int:
    """Characters of what a turn sends: messages, their tool calls, and the tool definitions."""
    chars = sum(len(m.content) for m in request.messages)
    chars += sum(len(dumps(c.args)) for m in request.messages for c in m.tool_calls)
    return chars + sum(len(t.description) + len(dumps(t.parameters)) for t in request.tools)


def completion_chars(outcome: TurnOutcome | None, streamed_text: str) -> int:
    """Characters of what a turn received: its text and its tool calls' arguments."""
    if outcome is None:
        return len(streamed_text)
    return len(outcome.text) + sum(len(dumps(c.args)) for c in outcome.tool_calls)


def turn_usage(
    request: AgentInput,
    outcome: TurnOutcome | None,
    streamed_text: str,
    price: ModelPrice | None,
) -> ModelUsage:
    """A turn's usage: as the model reported it, else estimated; priced when a price is known."""
    reported = outcome.usage if outcome is not None else None
    if reported is None:
        reported = estimate(prompt_chars(request), completion_chars(outcome, streamed_text))
    return reported.priced(price)
