"""Tenants' limits, kept in the database and editable at run time.

A tenant with a row of its own uses that row alone; every other tenant uses the row ``*`` (the
defaults), and a deployment with neither has no limits at all. ``None`` in a field means "no
limit". The deployment-wide cap on running attempts is a row of its own.

These are read where they are enforced (the claim, the accept), so a change applies at the next
claim or accept on every process; :meth:`Tenants.effective` is what a process caches for a second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import sqlalchemy as sa

from tether.jsonvalue import finite_number
from tether.owners import MAX_OWNER_CHARS, owner_name_problem
from tether.store.connection import Connection
from tether.store.engine import Database
from tether.store.schema import OPEN, Status, global_limits, invocations, status_is, tenants

DEFAULTS = "*"
"""The row whose limits apply to every tenant without a row of its own."""
ON_BUDGET = ("fail", "park")
MAX_NAME = MAX_OWNER_CHARS
"""A tenant's name is what an owner's may be (:func:`check_tenant_name`)."""

MAX_COUNT = 2**31 - 1
"""The largest count a limit's column holds (``integer``: max_active, max_queued, burst)."""
MAX_TOKENS = 2**62 - 1
"""The largest token budget (``bigint``, with room for the usage added to it)."""
MIN_WEIGHT = 1e-6
"""The smallest weight: each claim of a tenant's work advances its pass by ``1 / weight``
(:mod:`.fairness`), which must stay a number the claims can add to and store; below it a weight
such as ``5e-324`` made that step infinite and stalled every tenant's claims."""
MIN_RATE = 1e-6
"""The slowest accept rate, about one accept in 11.6 days: a refused accept's ``Retry-After``
is ``(1 - tokens) / rate`` seconds (:mod:`.buckets`), a whole number of seconds that must stay
one."""
MAX_RATE = float(MAX_COUNT)
"""The fastest accept rate: a bucket without a ``burst`` holds ``rate`` rounded up, a count like
``burst``; past it, ``3e9`` was a bucket PostgreSQL's integer could not hold, and every accept of
the tenant after its first was refused."""
MIN_BUDGET_PERIOD = 1.0
"""The shortest budget period, a second: a period starts at ``floor(now / period) × period``
(:mod:`.usage`); ``1e-300`` made that infinite and failed every agent run of the tenant."""


class LimitInvalid(ValueError):
    """A limit no tenant may have; its message names the field and why."""


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """One tenant's limits. ``None``: no limit."""

    weight: float = 1.0
    """Its share of busy workers against other tenants with queued work."""
    max_active: int | None = None
    """Attempts it may run at once, across every worker."""
    max_queued: int | None = None
    """Open (queued, running or waiting) invocations it may have; more are refused (429)."""
    rate: float | None = None
    """Accepts per second, sustained (a token bucket)."""
    burst: int | None = None
    """Accepts at once after a quiet spell; default: ``rate`` rounded up."""
    tokens_per_invocation: int | None = None
    """Model tokens one agent run may use."""
    tokens_per_period: int | None = None
    """Model tokens all its agent runs may use per ``budget_period``."""
    cost_per_period: float | None = None
    """Model cost (in the adapters' price unit) per ``budget_period``."""
    budget_period: float = 86400.0
    """Seconds per budget period (a day by default)."""
    on_budget: str = "fail"
    """``fail`` ends a run past a budget (``budget_exceeded``); ``park`` makes it wait."""

    def __post_init__(self) -> None:
        _check_positive("weight", self.weight, least=MIN_WEIGHT)
        for name in ("max_active", "max_queued"):
            _check_count(name, getattr(self, name))
        for name in ("tokens_per_invocation", "tokens_per_period"):
            _check_count(name, getattr(self, name), most=MAX_TOKENS)
        _check_count("burst", self.burst, least=1)
        if self.rate is not None:
            _check_positive("rate", self.rate, least=MIN_RATE, most=MAX_RATE)
        if self.cost_per_period is not None:
            _check_positive("cost_per_period", self.cost_per_period, zero=True)
        _check_positive("budget_period", self.budget_period, least=MIN_BUDGET_PERIOD)
        if self.on_budget not in ON_BUDGET:
            raise LimitInvalid(f"on_budget must be one of {', '.join(ON_BUDGET)}")

    @property
    def bucket_size(self) -> float:
        """Tokens the accept bucket holds when full."""
        if self.burst is not None:
            return float(self.burst)
        return float(math.ceil(self.rate)) if self.rate is not None else math.inf

    def changed(self, changes: Mapping[str, Any]) -> TenantLimits:
        """These limits with ``changes`` applied (validated); unknown names are refused."""
        unknown = sorted(set(changes) - set(FIELDS))
        if unknown:
            raise LimitInvalid(f"unknown limit: {', '.join(unknown)}")
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


FIELDS = tuple(f.name for f in fields(TenantLimits))


def check_tenant_name(tenant: str) -> str:
    """A tenant's name as the store keeps it; :data:`DEFAULTS` is the defaults row. The rule of
    owners' names (:mod:`tether.owners`), since an owner is its own tenant unless mapped: every
    owner but ``*`` can be named by the admin API and the CLI."""
    problem = owner_name_problem(tenant)
    if problem:
        raise LimitInvalid(f"a tenant name {problem}")
    return tenant


def _check_positive(
    name: str, value: float, *, zero: bool = False, least: float = 0.0, most: float = math.inf
) -> None:
    if value is None:  # null (API), none (CLI): what lifts the other limits
        raise LimitInvalid(f"{name} cannot be lifted: it always has a value, a finite number")
    if not finite_number(value):
        raise LimitInvalid(f"{name} must be a finite number")
    if value < least or value < 0 or (value == 0 and not zero):
        rule = f"at least {least:g}" if least else "at least 0" if zero else "above 0"
        raise LimitInvalid(f"{name} must be {rule}")
    if value > most:
        raise LimitInvalid(f"{name} must be at most {most:.0f}")


def _check_count(name: str, value: int | None, *, least: int = 0, most: int = MAX_COUNT) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise LimitInvalid(f"{name} must be a whole number from {least} to {most}, or null")


@dataclass(frozen=True, slots=True)
class OpenCounts:
    """A tenant's open invocations, by status."""

    queued: int = 0
    running: int = 0
    waiting: int = 0


@dataclass(frozen=True, slots=True)
class TenantRow:
    tenant: str
    limits: TenantLimits
    updated_at: float


class Tenants:
    """Reads and writes ``tether_tenants`` and ``tether_global_limits``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def rows(self) -> list[TenantRow]:
        """Every tenant with limits of its own, the defaults row first."""
        async with self._db.connection() as conn:
            result = await conn.execute(sa.select(tenants).order_by(tenants.c.tenant))
            found = [_row(r) for r in result.mappings()]
        return sorted(found, key=lambda r: (r.tenant != DEFAULTS, r.tenant))

    async def row(self, tenant: str) -> TenantRow | None:
        async with self._db.connection() as conn:
            result = await conn.execute(sa.select(tenants).where(tenants.c.tenant == tenant))
            found = result.mappings().first()
        return _row(found) if found is not None else None

    async def effective(self, names: Sequence[str]) -> dict[str, TenantLimits]:
        """The limits that apply to each tenant: its row, else the defaults, else none."""
        async with self._db.connection() as conn:
            return await effective_limits(conn, names)

    async def set(self, tenant: str, changes: Mapping[str, Any]) -> TenantRow:
        """Apply ``changes`` to the tenant's row; a tenant without one starts from the defaults.
        Raises :class:`LimitInvalid` before writing anything.

        One upsert that writes the changed limits only: concurrent changes of other limits (two
        admins, or the CLI beside the API) all land, and two first writes of one tenant make one
        row (the later updates the earlier's) instead of a unique violation. A limit is checked
        on its own, so the changed ones are valid on any row they land on."""
        check_tenant_name(tenant)
        async with self._db.transaction() as conn:
            # A new row starts from the defaults, whatever row the tenant had when read: a
            # remove that commits meanwhile must not see the removed limits come back.
            current = await conn.execute(sa.select(tenants).where(tenants.c.tenant == DEFAULTS))
            defaults = current.mappings().first()
            limits = (_row(defaults).limits if defaults else TenantLimits()).changed(changes)
            values = {**limits.to_json(), "updated_at": self._db.now}
            insert = self._db.dialect.upsert(tenants).values(tenant=tenant, **values)
            written = [*changes, "updated_at"]
            await conn.execute(
                insert.on_conflict_do_update(
                    index_elements=[tenants.c.tenant],
                    set_={name: insert.excluded[name] for name in written},
                )
            )
        row = await self.row(tenant)
        assert row is not None
        return row

    async def remove(self, tenant: str) -> bool:
        """Drop the tenant's own row (it falls back to the defaults); False if it had none."""
        async with self._db.transaction() as conn:
            result = await conn.execute(sa.delete(tenants).where(tenants.c.tenant == tenant))
        return bool(result.rowcount)

    async def open_counts(self, names: Sequence[str] | None = None) -> dict[str, OpenCounts]:
        """Open invocations of each tenant that has any (of ``names`` only, when given): one
        grouped count over the ``tether_invocations_tenant_open`` index."""
        inv = invocations.c
        query = sa.select(inv.tenant, inv.status, sa.func.count()).where(
            status_is(inv.status, *OPEN)
        )
        if names is not None:
            query = query.where(inv.tenant.in_(sorted(set(names))))
        counted: dict[str, dict[str, int]] = {}
        async with self._db.connection() as conn:
            for tenant, status, count in await conn.execute(query.group_by(inv.tenant, inv.status)):
                counted.setdefault(tenant, {})[_COUNTED[status]] = int(count)
        return {tenant: OpenCounts(**by_status) for tenant, by_status in counted.items()}

    async def global_max_active(self) -> int | None:
        async with self._db.connection() as conn:
            value = await conn.scalar(sa.select(global_limits.c.max_active))
        return None if value is None else int(value)

    async def set_global_max_active(self, max_active: int | None) -> None:
        _check_count("max_active", max_active)
        async with self._db.transaction() as conn:
            updated = await conn.execute(
                sa.update(global_limits).values(max_active=max_active, updated_at=self._db.now)
            )
            if not updated.rowcount:
                await conn.execute(
                    sa.insert(global_limits).values(
                        id=1, max_active=max_active, updated_at=self._db.now
                    )
                )


_COUNTED = {
    Status.QUEUED.value: "queued",
    Status.ACTIVE.value: "running",
    Status.WAITING.value: "waiting",
}


async def effective_limits(conn: Connection, names: Sequence[str]) -> dict[str, TenantLimits]:
    """:meth:`Tenants.effective`, read in the caller's transaction."""
    wanted = sorted({*names, DEFAULTS})
    result = await conn.execute(sa.select(tenants).where(tenants.c.tenant.in_(wanted)))
    found = {r.tenant: r.limits for r in map(_row, result.mappings())}
    return effective_from(names, found, found.get(DEFAULTS))


def effective_from(
    names: Sequence[str], own: Mapping[str, TenantLimits], fallback: TenantLimits | None
) -> dict[str, TenantLimits]:
    """The rule: a tenant's own row, else the defaults row, else no limits."""
    default = fallback or TenantLimits()
    return {name: own.get(name, default) for name in names}


def limits_from(row: Mapping[str, Any] | sa.RowMapping) -> TenantLimits:
    """The limits in a row of ``tether_tenants`` (or a query's columns named like it)."""
    values = {name: row[name] for name in FIELDS}
    for name in ("max_active", "max_queued", "burst", "tokens_per_invocation", "tokens_per_period"):
        values[name] = None if values[name] is None else int(values[name])
    for name in ("weight", "budget_period"):
        values[name] = float(values[name])
    # a row written before the bounds may hold less or more: read as the bound, as it now must
    # be set (SQLite stored counts up to 2^62; either store rates past MAX_RATE)
    values["weight"] = max(values["weight"], MIN_WEIGHT)
    values["budget_period"] = max(values["budget_period"], MIN_BUDGET_PERIOD)
    if values["rate"] is not None:
        values["rate"] = min(max(float(values["rate"]), MIN_RATE), MAX_RATE)
    for name in ("max_active", "max_queued", "burst"):
        if values[name] is not None:
            values[name] = min(values[name], MAX_COUNT)
    return TenantLimits(**values)


def _row(row: sa.RowMapping) -> TenantRow:
    return TenantRow(row["tenant"], limits_from(row), float(row["updated_at"]))
