"""Token and cost budgets: checked before every model call, charged after it.

Three budgets come from the tenant's effective limits (``tether_tenants``):
``tokens_per_invocation`` (everything one invocation's calls used, across its attempts), and
``tokens_per_period`` and ``cost_per_period`` (everything the tenant's calls used in the current
``budget_period``, whose periods are aligned to the epoch). A call may start while every budget
has something left; its usage is added when it ends, so a run overshoots by at most the one
call that crossed the line.

Past a budget, the tenant's ``on_budget`` decides: ``fail`` raises :class:`BudgetExceeded` (the
invocation fails with ``budget_exceeded``); ``park`` parks the invocation on a wait named
``budget:<digest>:<n>`` that times out when the next period starts, or that a client resolves
with any value (``POST /api/invocations/{id}/input``) to have it check again at once, after a
limit was raised. Either way the check runs again before the call.

Only a call that is really made is checked and charged: a replayed model turn (recorded by an
earlier attempt) neither waits nor counts again, while a call that a replacement attempt makes
again after a crash is new spending and counts.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
from dataclasses import dataclass
from typing import Protocol

from tether.durable import MAX_WAIT_SECONDS, Durable, WaitTimeout
from tether.store.errors import StoreUnavailable
from tether.store.usage import BudgetState, Usage
from tether.usage import BudgetExceeded, ModelUsage

log = logging.getLogger(__name__)

WAIT_PREFIX = "budget:"
MIN_WAIT = 0.001


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a budget check found: the first budget spent (None: the call may start), whether
    the tenant parks past it, and how long until the next period starts."""

    budget: str | None = None
    park: bool = False
    next_period_in: float | None = None


def judge(state: BudgetState) -> Verdict:
    """The verdict on ``state``: a budget is spent once its usage has reached its limit."""
    limits = state.limits
    spent = [
        (limits.tokens_per_invocation, state.invocation.total_tokens, "tokens_per_invocation"),
        (limits.tokens_per_period, state.period_tokens, "tokens_per_period"),
        (limits.cost_per_period, state.period_cost, "cost_per_period"),
    ]
    for limit, used, name in spent:
        if limit is not None and used >= limit:
            return Verdict(name, limits.on_budget == "park", state.period_end - state.now)
    return Verdict()


class UsageMeter(Protocol):
    """Where one invocation's budget checks and usage go."""

    async def check(self) -> Verdict: ...

    async def record(self, usage: ModelUsage) -> None: ...


class StoreMeter:
    """A :class:`UsageMeter` on the store: the tenant's limits and usage read at every check,
    each call's usage added to the invocation and to the tenant's current period."""

    def __init__(self, usage: Usage, invocation_id: str, tenant: str) -> None:
        self._usage = usage
        self._invocation_id = invocation_id
        self._tenant = tenant
        self._period: float | None = None

    async def check(self) -> Verdict:
        state = await self._usage.state(self._invocation_id, self._tenant)
        self._period = state.limits.budget_period
        return judge(state)

    async def record(self, usage: ModelUsage) -> None:
        """Add a call's usage. The database being unavailable loses this one count (logged)
        rather than failing the model turn, whose step would then replay as failed."""
        try:
            if self._period is None:  # a call recorded without a check: read the period now
                await self.check()
            assert self._period is not None
            await self._usage.add(self._invocation_id, self._tenant, self._period, usage)
        except StoreUnavailable as exc:
            log.warning(
                "invocation %s: the usage of a model call (%d tokens) was not recorded (%s)",
                self._invocation_id,
                usage.total_tokens,
                exc,
            )


def wait_name(step: str, n: int) -> str:
    """The name of the ``n``-th budget wait before model call ``step`` (a wait name is short and
    plain; a step name may be neither)."""
    return f"{WAIT_PREFIX}{hashlib.sha256(step.encode()).hexdigest()[:16]}:{n}"


async def admit(durable: Durable, meter: UsageMeter, invocation_id: str, step: str) -> None:
    """Let model call ``step`` start, or raise :class:`BudgetExceeded`, or park until a budget
    allows it. A replayed step is let through without a check (its budget waits counted as
    replayed too); the budget waits of an earlier attempt are replayed in order before the
    check, so every attempt takes the same path."""
    if durable.recorded(step):
        for n in itertools.count():
            if not durable.pass_over(wait_name(step, n)):
                return
    for n in itertools.count():
        name = wait_name(step, n)
        if durable.resolved(name):
            with contextlib.suppress(WaitTimeout):
                await durable.wait_for_input(name)
            continue
        verdict = await meter.check()
        if verdict.budget is None:
            return
        log.warning(
            "invocation %s: the %s budget is spent before model call %s (%s)",
            invocation_id,
            verdict.budget,
            step,
            "parking" if verdict.park else "failing",
        )
        if not verdict.park:
            raise BudgetExceeded(verdict.budget)
        await durable.wait_for_input(
            name,
            prompt=(
                f"the {verdict.budget} budget is spent: the run resumes when the next budget "
                "period starts, or when any value is posted to this wait (after a limit was "
                "raised)"
            ),
            timeout=min(max(MIN_WAIT, verdict.next_period_in or MIN_WAIT), MAX_WAIT_SECONDS),
            details={"budget": verdict.budget},
        )
