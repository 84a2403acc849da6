"""Batches as bound parameters, so a batch's SQL text is one of a few per statement.

Rows here are bound parameters with fixed names, and batch sizes round up to a power of two
with filler rows that match nothing, so the text repeats and PostgreSQL reuses its prepared
statements (psycopg prepares a text it has seen five times). SQLAlchemy (2.1) gives a statement
holding ``VALUES`` no cache key, though, so it still compiles these on every execution (about 3 %
of a busy worker's CPU, measured with a sampling profiler): a cacheable construct is still to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa


def padded(count: int) -> int:
    """``count`` rounded up to a power of two: few statement shapes, each compiled once."""
    return 1 << (max(count, 1) - 1).bit_length()


def bound_values(name: str, columns: Sequence[sa.ColumnClause[Any]], size: int) -> sa.CTE:
    """A ``WITH name(columns) AS (VALUES …)`` of ``size`` rows of bound parameters, named
    ``{name}_{column}_{row}``; :func:`bound_rows` gives their values."""
    data = [
        tuple(sa.bindparam(f"{name}_{c.name}_{n}", type_=c.type) for c in columns)
        for n in range(size)
    ]
    return sa.values(*columns, name=name).data(data).cte(name)


def bound_rows(
    name: str,
    columns: Sequence[sa.ColumnClause[Any]],
    rows: Sequence[Sequence[Any]],
    filler: Sequence[Any],
) -> dict[str, Any]:
    """The parameters of :func:`bound_values` for ``rows``, padded with ``filler`` rows."""
    params: dict[str, Any] = {}
    for n in range(padded(len(rows))):
        row = rows[n] if n < len(rows) else filler
        for column, value in zip(columns, row, strict=True):
            params[f"{name}_{column.name}_{n}"] = value
    return params
