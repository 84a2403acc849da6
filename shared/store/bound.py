"""Batches as bound parameters, so a batch's SQL text is one of a few per statement.

Rows here are bound parameters with fixed names, and batch sizes round up to a power of two
with filler rows that match nothing, so the text repeats and PostgreSQL reuses its prepared
statements (psycopg prepares a text it has seen five times). The rows are a ``UNION ALL`` of
one-row ``SELECT``s rather than a ``VALUES`` list: SQLAlchemy gives a statement holding
``VALUES`` no cache key, so it compiled those statements on every execution (the ``UPDATE …
FROM`` of a batch's endings and of its event counts: about a tenth of ``tether dev``'s CPU under
a burst, 3 % of a busy worker's), where a compound ``SELECT`` of bound parameters is compiled
once per size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa


def padded(count: int) -> int:
    """``count`` rounded up to a power of two: few statement shapes, each compiled once."""
    return 1 << (max(count, 1) - 1).bit_length()


COMPOUND_TERMS = 256
"""``SELECT``s per compound ``SELECT`` (a power of two): SQLite's holds at most 500 terms."""


def bound_values(name: str, columns: Sequence[sa.ColumnClause[Any]], size: int) -> sa.CTE:
    """A ``WITH name(columns) AS (SELECT … UNION ALL SELECT …)`` of ``size`` rows of bound
    parameters, named ``{name}_{column}_{row}``; :func:`bound_rows` gives their values. Over
    :data:`COMPOUND_TERMS` rows, a ``UNION ALL`` of such unions, each a subquery."""
    rows = [
        sa.select(
            *(sa.bindparam(f"{name}_{c.name}_{n}", type_=c.type).label(c.name) for c in columns)
        )
        for n in range(size)
    ]
    chunks = [_union(rows[k : k + COMPOUND_TERMS]) for k in range(0, len(rows), COMPOUND_TERMS)]
    if len(chunks) == 1:
        return chunks[0].cte(name)
    return _union([sa.select(*chunk.subquery().c) for chunk in chunks]).cte(name)


def _union(selects: Sequence[sa.Select[Any]]) -> sa.Select[Any] | sa.CompoundSelect[Any]:
    return selects[0] if len(selects) == 1 else sa.union_all(*selects)


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
