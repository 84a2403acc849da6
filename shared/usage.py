"""Model usage: what one model call cost, what a run has used, and the error past a budget.

Adapters report the tokens a model says it used; a model that says nothing is estimated from
the text (:func:`estimate`) and the usage is marked ``estimated``. Cost is tokens times the
model's price per million tokens, and 0 when no price is known. Budgets are enforced by
:mod:`tether.budgets`; a handler reaches them through ``ctx.admit_model_call`` and
``ctx.record_model_usage``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.jsonvalue import finite_number

CHARS_PER_TOKEN = 4
"""The estimate's rule: one token per 4 characters (rounded up) of prompt and of completion."""


class BudgetExceeded(Exception):
    """A token or cost budget is spent: no further model call may start. The invocation fails
    with ``budget_exceeded`` (a tenant whose ``on_budget`` is ``park`` waits instead)."""

    def __init__(self, budget: str) -> None:
        super().__init__(f"the {budget} budget is spent")
        self.budget = budget


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """A model's price per million input and output tokens (in whatever unit the deployment
    counts cost in)."""

    input_per_million: float = 0.0
    output_per_million: float = 0.0

    def __post_init__(self) -> None:
        for value in (self.input_per_million, self.output_per_million):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError("a price is a number per million tokens")
            if not finite_number(value) or value < 0:
                raise ValueError("a price is a finite number of at least 0")

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (
            input_tokens * self.input_per_million + output_tokens * self.output_per_million
        ) / 1_000_000


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """One model call's usage."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def priced(self, price: ModelPrice | None) -> ModelUsage:
        """This usage with its cost from ``price`` (unchanged without one)."""
        if price is None:
            return self
        cost = price.cost(self.input_tokens, self.output_tokens)
        return ModelUsage(self.input_tokens, self.output_tokens, cost, self.estimated)


def estimate_tokens(text_chars: int) -> int:
    """Tokens for ``text_chars`` characters by the estimate's rule (:data:`CHARS_PER_TOKEN`)."""
    return -(-max(0, text_chars) // CHARS_PER_TOKEN)


def estimate(prompt_chars: int, completion_chars: int) -> ModelUsage:
    """The usage of a call whose model reported none, from the characters it read and wrote."""
    return ModelUsage(
        estimate_tokens(prompt_chars), estimate_tokens(completion_chars), estimated=True
    )


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """What a run (or any set of calls) used: the sums, and whether any part was estimated."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    estimated: bool = False
    model_calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def plus(self, usage: ModelUsage) -> UsageTotals:
        return UsageTotals(
            self.input_tokens + usage.input_tokens,
            self.output_tokens + usage.output_tokens,
            self.cost + usage.cost,
            self.estimated or usage.estimated,
            self.model_calls + 1,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cost": self.cost,
            "estimated": self.estimated,
            "model_calls": self.model_calls,
        }
