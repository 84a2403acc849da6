"""Tenants' accept-rate token buckets, shared by every gateway process through the database.

A bucket holds up to ``size`` tokens (a tenant's ``burst``) and refills at ``rate`` tokens a
second; each accepted request takes one. A take is **one statement per tenant**: an upsert whose
``SET`` reads the row it replaces, so it refills, takes as many of the wanted tokens as there
are whole ones, and records both the tokens left and how many it granted, atomically (the row
is locked by the statement itself on PostgreSQL; SQLite has one writer). Two gateways taking
from one bucket at once each get what the other left: the sum granted never exceeds the tokens
there were. Time is the database clock unless a test gives ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from tether.store.engine import Database
from tether.store.schema import tenant_buckets

bucket = tenant_buckets.c


@dataclass(frozen=True, slots=True)
class Want:
    """What one accept batch asks of a tenant's bucket."""

    count: int
    """Tokens wanted: the batch's requests of that tenant."""
    rate: float
    """Tokens per second the bucket refills."""
    size: float
    """Tokens it holds when full (``burst``)."""


@dataclass(frozen=True, slots=True)
class Grant:
    granted: int
    """How many of the wanted tokens were taken (the first ``granted`` requests pass)."""
    tokens: float
    """Tokens left after the take."""
    rate: float

    @property
    def retry_after(self) -> int:
        """Whole seconds (at least 1) until the bucket holds a token again."""
        return max(1, math.ceil((1.0 - self.tokens) / self.rate))


class Buckets:
    """Reads and takes from ``tether_tenant_buckets``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def take(self, wants: Mapping[str, Want], now: float | None = None) -> dict[str, Grant]:
        """Take tokens from each tenant's bucket: each statement whole on its own (committed
        alone on PostgreSQL, so it holds its row only while it runs; tenants in name order)."""
        grants: dict[str, Grant] = {}
        if not wants:
            return grants
        clock: sa.ColumnElement[float] = self._db.now if now is None else sa.literal(now)
        async with self._db.autocommit() as conn:
            for tenant in sorted(wants):
                want = wants[tenant]
                row = (await conn.execute(self._take(tenant, want, clock))).one()
                grants[tenant] = Grant(int(row.granted), float(row.tokens), want.rate)
        return grants

    async def tokens(self, tenant: str) -> float | None:
        """The tokens the bucket held at its last take (None: never taken from)."""
        async with self._db.connection() as conn:
            value = await conn.scalar(sa.select(bucket.tokens).where(bucket.tenant == tenant))
        return None if value is None else float(value)

    def _take(self, tenant: str, want: Want, clock: sa.ColumnElement[float]) -> sa.Executable:
        size = sa.literal(float(want.size), sa.Float)
        # the seconds that fill it, and one more whatever the rounding: elapsed × rate
        # overflowed a float for a rate such as 1e308 (PostgreSQL refuses an infinity)
        filling = sa.literal(want.size / want.rate + 1.0, sa.Float)
        elapsed = _smaller(_larger(clock - bucket.at, sa.literal(0.0)), filling)
        refill = bucket.tokens + elapsed * sa.literal(want.rate)
        refilled = _smaller(refill, size)
        whole: sa.ColumnElement[Any] = self._db.dialect.whole(refilled)
        granted = _smaller(whole, sa.literal(want.count, sa.Integer))
        first = min(want.count, math.floor(want.size))  # a new bucket starts full
        insert = self._db.dialect.upsert(tenant_buckets).values(
            tenant=tenant, tokens=float(want.size) - first, at=clock, granted=first
        )
        take: sa.Executable = insert.on_conflict_do_update(
            index_elements=[bucket.tenant],
            set_={"tokens": refilled - granted, "at": clock, "granted": granted},
        ).returning(bucket.tokens, bucket.granted)
        return take


def _smaller(a: sa.ColumnElement[Any], b: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """``LEAST(a, b)`` in both dialects (SQLite has ``min``, PostgreSQL ``LEAST``)."""
    return sa.case((a < b, a), else_=b)


def _larger(a: sa.ColumnElement[float], b: sa.ColumnElement[float]) -> sa.ColumnElement[float]:
    return sa.case((a > b, a), else_=b)
