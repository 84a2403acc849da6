"""Model usage in the database: per invocation (its ``usage_*`` columns) and per tenant and
budget period (``tether_tenant_usage``).

Every model call adds its usage once, in one transaction, with increments done by the database
(``x = x + :n`` and a conditional upsert), so concurrent calls of one tenant on many workers
never lose an update. A period starts at a multiple of the tenant's ``budget_period`` since the
epoch, on the database clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from tether.store.engine import Database
from tether.store.schema import USAGE_COLUMNS, invocations, tenant_usage, usage_of
from tether.store.tenants import TenantLimits, Tenants
from tether.usage import ModelUsage, UsageTotals

inv = invocations.c
tu = tenant_usage.c


def period_start(now: float, period: float) -> float:
    """The start of the budget period ``now`` falls in: periods are aligned to the epoch."""
    return math.floor(now / period) * period


@dataclass(frozen=True, slots=True)
class BudgetState:
    """What a budget check reads, at one moment: the tenant's limits, the current period's
    usage and the invocation's own."""

    limits: TenantLimits
    now: float
    period_start: float
    period_tokens: int
    period_cost: float
    invocation: UsageTotals

    @property
    def period_end(self) -> float:
        return self.period_start + self.limits.budget_period


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """A tenant's usage: in its current budget period, and over every period still stored."""

    tenant: str
    period_tokens: int
    period_cost: float
    tokens: int
    cost: float


class Usage:
    """Reads and adds model usage."""

    def __init__(self, db: Database, tenants: Tenants) -> None:
        self._db = db
        self._tenants = tenants

    async def state(self, invocation_id: str, tenant: str) -> BudgetState:
        """The tenant's limits and usage now, and the invocation's usage so far."""
        limits = (await self._tenants.effective([tenant]))[tenant]
        async with self._db.connection() as conn:
            now = float(await conn.scalar(sa.select(self._db.now)) or 0.0)
            start = period_start(now, limits.budget_period)
            row = (
                await conn.execute(
                    sa.select(tu.tokens, tu.cost).where(
                        tu.tenant == tenant, tu.period_start == start
                    )
                )
            ).first()
            own = (
                (await conn.execute(sa.select(*USAGE_COLUMNS).where(inv.id == invocation_id)))
                .mappings()
                .first()
            )
        return BudgetState(
            limits,
            now,
            start,
            int(row.tokens) if row is not None else 0,
            float(row.cost) if row is not None else 0.0,
            (usage_of(own) if own is not None else None) or UsageTotals(),
        )

    async def add(
        self, invocation_id: str, tenant: str, budget_period: float, usage: ModelUsage
    ) -> float:
        """Add one model call's usage to its invocation and to its tenant's current period;
        returns the start of the period it was charged to."""
        changes: dict[str, Any] = {
            "usage_input_tokens": inv.usage_input_tokens + usage.input_tokens,
            "usage_output_tokens": inv.usage_output_tokens + usage.output_tokens,
            "usage_cost": inv.usage_cost + usage.cost,
            "usage_model_calls": inv.usage_model_calls + 1,
        }
        if usage.estimated:
            changes["usage_estimated"] = sa.true()
        async with self._db.transaction() as conn:
            now = float(await conn.scalar(sa.select(self._db.now)) or 0.0)
            start = period_start(now, budget_period)
            await conn.execute(
                sa.update(invocations).where(inv.id == invocation_id).values(changes)
            )
            insert = self._db.dialect.upsert(tenant_usage).values(
                tenant=tenant,
                period_start=start,
                tokens=usage.total_tokens,
                cost=usage.cost,
                model_calls=1,
                updated_at=now,
            )
            await conn.execute(
                insert.on_conflict_do_update(
                    index_elements=[tu.tenant, tu.period_start],
                    set_={
                        "tokens": tu.tokens + insert.excluded.tokens,
                        "cost": tu.cost + insert.excluded.cost,
                        "model_calls": tu.model_calls + 1,
                        "updated_at": insert.excluded.updated_at,
                    },
                )
            )
        return start

    async def tenants(self, names: Sequence[str] | None = None) -> list[TenantUsage]:
        """Every tenant with usage stored (or just ``names``): its current period's and its
        total, by tenant name."""
        query = sa.select(tu.tenant, tu.period_start, tu.tokens, tu.cost, self._db.now.label("now"))
        if names is not None:
            query = query.where(tu.tenant.in_(list(names)))
        async with self._db.connection() as conn:
            rows = (await conn.execute(query)).all()
        if not rows:
            return []
        limits = await self._tenants.effective(sorted({r.tenant for r in rows}))
        out: dict[str, TenantUsage] = {}
        for r in rows:
            seen = out.get(r.tenant, TenantUsage(r.tenant, 0, 0.0, 0, 0.0))
            current = r.period_start == period_start(r.now, limits[r.tenant].budget_period)
            out[r.tenant] = TenantUsage(
                r.tenant,
                seen.period_tokens + (int(r.tokens) if current else 0),
                seen.period_cost + (float(r.cost) if current else 0.0),
                seen.tokens + int(r.tokens),
                seen.cost + float(r.cost),
            )
        return [out[name] for name in sorted(out)]
