"""The admin API's bodies (``/api/admin/...``): tenants' limits, their open invocations, the
global cap. Limits are validated in one place, :class:`tether.store.tenants.TenantLimits`; the
request models here only describe them in ``/openapi.json``."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, StrictFloat, StrictInt, StrictStr, WithJsonSchema

from tether.gateway.models import STRICT, Timestamp
from tether.outcomes import iso_utc
from tether.store.tenants import (
    MAX_RATE,
    MIN_BUDGET_PERIOD,
    MIN_RATE,
    MIN_WEIGHT,
    ON_BUDGET,
    OpenCounts,
    TenantLimits,
    TenantRow,
)

Count = Annotated[StrictInt, Field(ge=0)]
Number = StrictInt | StrictFloat
ALWAYS_SET = "Cannot be lifted: null is refused (422)."
"""Of a limit that always has a value: its field takes null only so that the store's own check
answers it (``tether.store.tenants``), and the schema shows it as never null, with no default."""


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)  # (None, which the type shown does not take)


class LimitsView(BaseModel):
    """A tenant's limits; null: no limit."""

    model_config = STRICT

    weight: float = Field(description="Its share of busy workers against other busy tenants.")
    max_active: int | None = Field(description="Attempts it may run at once.")
    max_queued: int | None = Field(
        description="Open (queued, running, waiting) invocations it may have; more get 429."
    )
    rate: float | None = Field(description="Accepts per second, sustained (token bucket).")
    burst: int | None = Field(description="Accepts at once after a quiet spell (default: rate).")
    tokens_per_invocation: int | None
    tokens_per_period: int | None
    cost_per_period: float | None
    budget_period: float = Field(description="Seconds per budget period.")
    on_budget: str = Field(description="fail or park, past a budget.")

    @classmethod
    def of(cls, limits: TenantLimits) -> LimitsView:
        return cls.model_validate(limits.to_json())


class LimitsChange(BaseModel):
    """``PUT``/``PATCH``: any subset of the limits; null lifts a limit. ``PUT`` starts from no
    limits at all, ``PATCH`` from the tenant's current ones (its row, else the defaults)."""

    model_config = STRICT

    weight: Annotated[Number | None, WithJsonSchema({"type": "number", "minimum": MIN_WEIGHT})] = (
        Field(None, ge=MIN_WEIGHT, description=ALWAYS_SET, json_schema_extra=_no_default)
    )
    max_active: Count | None = None
    max_queued: Count | None = None
    rate: Number | None = Field(None, ge=MIN_RATE, le=MAX_RATE)
    burst: Annotated[StrictInt, Field(ge=1)] | None = None
    tokens_per_invocation: Count | None = None
    tokens_per_period: Count | None = None
    cost_per_period: Number | None = Field(None, ge=0)
    budget_period: Annotated[
        Number | None, WithJsonSchema({"type": "number", "minimum": MIN_BUDGET_PERIOD})
    ] = Field(None, ge=MIN_BUDGET_PERIOD, description=ALWAYS_SET, json_schema_extra=_no_default)
    on_budget: Annotated[
        StrictStr | None, WithJsonSchema({"type": "string", "enum": list(ON_BUDGET)})
    ] = Field(None, description=f"fail or park. {ALWAYS_SET}", json_schema_extra=_no_default)


class OpenCountsView(BaseModel):
    model_config = STRICT

    queued: int
    running: int
    waiting: int

    @classmethod
    def of(cls, counts: OpenCounts | None) -> OpenCountsView:
        counts = counts or OpenCounts()
        return cls(queued=counts.queued, running=counts.running, waiting=counts.waiting)


class TenantView(BaseModel):
    """One tenant: the limits that apply to it, whether they are its own (else the defaults'),
    and its open invocations now."""

    model_config = STRICT

    tenant: str
    own_limits: bool
    limits: LimitsView
    open: OpenCountsView
    updated_at: Timestamp | None = Field(description="When its own limits last changed.")

    @classmethod
    def of(
        cls, tenant: str, row: TenantRow | None, applied: TenantLimits, counts: OpenCounts | None
    ) -> TenantView:
        return cls(
            tenant=tenant,
            own_limits=row is not None,
            limits=LimitsView.of(row.limits if row is not None else applied),
            open=OpenCountsView.of(counts),
            updated_at=iso_utc(row.updated_at) if row is not None else None,
        )


class DefaultsView(BaseModel):
    """The limits of every tenant without its own (the row ``*``)."""

    model_config = STRICT

    limits: LimitsView
    updated_at: Timestamp | None


class GlobalView(BaseModel):
    """Deployment-wide limits."""

    model_config = STRICT

    max_active: int | None = Field(description="Attempts running at once, all tenants.")


class GlobalChange(BaseModel):
    model_config = STRICT

    max_active: Count | None = Field(description="null lifts the cap.")


class TenantList(BaseModel):
    """Every tenant with limits of its own or open invocations, by name."""

    model_config = STRICT

    data: list[TenantView]
    defaults: DefaultsView
    global_max_active: int | None = Field(description="As GET /api/admin/global.")


class RemovedView(BaseModel):
    model_config = STRICT

    tenant: str
    removed: bool = Field(description="False: it had no limits of its own.")
