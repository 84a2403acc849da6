"""Batches as bound parameters, so a batch's SQL text is one of a few per statement.

Where the database binds arrays (PostgreSQL), a batch is one array per column, unnested: one
text for every batch size (each array bound as text and cast by the statement), which psycopg
prepares once it has seen it five times and which PostgreSQL plans in constant time. Elsewhere
(SQLite) rows are bound parameters with fixed names, and batch sizes round up to a power of two
with filler rows that match nothing, so the text repeats. Those rows are a ``UNION ALL`` of
one-row ``SELECT``s rather than a ``VALUES`` list: SQLAlchemy gives a statement holding
``VALUES`` no cache key, so it compiled those statements on every execution (the ``UPDATE …
FROM`` of a batch's endings and of its event counts: about a tenth of ``tether dev``'s CPU under
a burst, 3 % of a busy worker's), where a compound ``SELECT`` of bound parameters is compiled
once per size. PostgreSQL must not get that form: it plans a ``UNION ALL`` of 128 one-row
``SELECT``s in ~28 ms (256: ~100 ms) against ~2 ms for the arrays, on every execution until the
text is prepared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY

from tether.jsonvalue import dumps


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


@dataclass(frozen=True)
class BoundBatch:
    """Rows of ``columns`` as a CTE named ``name``: arrays unnested where the database binds
    them (``arrays``), else :func:`bound_values`. A statement holding the CTE is built for a
    :meth:`shape`; :meth:`params` binds the rows."""

    name: str
    columns: tuple[sa.ColumnClause[Any], ...]
    arrays: bool

    def shape(self, count: int) -> int:
        """The statement's shape for ``count`` rows: one shape for every count with arrays
        (0), else the count padded to a power of two."""
        return 0 if self.arrays else padded(count)

    def cte(self, shape: int) -> sa.CTE:
        if not self.arrays:
            return bound_values(self.name, self.columns, shape)
        arrays = [
            sa.cast(sa.bindparam(f"{self.name}_{c.name}"), ARRAY(self._array_type(c)))
            for c in self.columns
        ]
        rows = (
            sa.func.unnest(*arrays)
            .table_valued(*(c.name for c in self.columns))
            .render_derived(name=f"{self.name}_rows")
        )
        return sa.select(*rows.c).cte(self.name)

    def params(self, rows: Sequence[Sequence[Any]], filler: Sequence[Any]) -> dict[str, Any]:
        """The parameters for ``rows``; ``filler``, a row that matches nothing, pads them
        where the shape needs it. Arrays hold text (JSON values as JSON text), cast by the
        statement: psycopg refuses a list mixing ints and floats, and types a list of ints by
        its largest (``int2[]`` …), so values as they come would make several prepared
        statements of one text, or none."""
        if not self.arrays:
            return bound_rows(self.name, self.columns, rows, filler)
        return {
            f"{self.name}_{c.name}": [_array_value(c, row[i]) for row in rows]
            for i, c in enumerate(self.columns)
        }

    @staticmethod
    def _array_type(column: sa.ColumnClause[Any]) -> Any:
        return sa.Text() if isinstance(column.type, sa.JSON) else column.type


def _array_value(column: sa.ColumnClause[Any], value: Any) -> str | None:
    if value is None:
        return None
    return dumps(value) if isinstance(column.type, sa.JSON) else str(value)
