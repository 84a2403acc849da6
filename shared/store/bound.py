"""Batches as bound parameters, so a batch's SQL text is the same for every batch size.

Where the database binds arrays (PostgreSQL), a batch is one array per column, unnested: each
array bound as text and cast by the statement, which psycopg prepares once it has seen it five
times and which PostgreSQL plans in constant time. Elsewhere (SQLite) a batch is one parameter,
a JSON array of rows, each row an array of its values, taken apart in SQLite's C code
(``json_each``, ``json_extract``).

Both keep the statement's text the same for every batch, so SQLAlchemy compiles it once, and
both bind a handful of parameters whatever the batch's size. SQLite used to get a ``UNION ALL``
of one-row ``SELECT``s of bound parameters (``{name}_{column}_{row}``), padded to a power of two:
one text per padded size, but a parameter per value, each passing through SQLAlchemy's binding
(its parameter processing was about a sixth of a store transaction's CPU in ``tether dev``).
PostgreSQL must not get that form either: it plans a ``UNION ALL`` of 128 one-row ``SELECT``s in
~28 ms (256: ~100 ms) against ~2 ms for the arrays, on every execution until the text is
prepared.

JSON values of a batch (a JSON column's) travel as their text, a string in the row; the statement
assigns that text to the JSON column it belongs to (:meth:`.dialect.Dialect.json`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY

from tether.jsonvalue import dumps


def padded(count: int) -> int:
    """``count`` rounded up to a power of two: few statement shapes, each compiled once."""
    return 1 << (max(count, 1) - 1).bit_length()


ToText = Callable[[Any], str | None]
"""How a column's values become the text a batch carries them as."""


@dataclass(frozen=True)
class BoundBatch:
    """Rows of ``columns`` as a CTE named ``name``: arrays unnested where the database binds
    them (``arrays``), else the elements of one JSON array. A statement holding :meth:`cte`
    is built once per database; :meth:`params` binds the rows."""

    name: str
    columns: tuple[sa.ColumnClause[Any], ...]

    def cte(self, arrays: bool, *, positions: bool = False) -> sa.CTE:
        """The batch's rows; with ``positions``, also each row's place in the batch
        (``position``, ascending in the order given) to order by."""
        if not arrays:
            rows = sa.func.json_each(sa.bindparam(self.name, type_=sa.Text)).table_valued(
                "value", "key"
            )
            values = [
                sa.type_coerce(
                    sa.func.json_extract(rows.c.value, sa.literal_column(f"'$[{i}]'")), c.type
                ).label(c.name)
                for i, c in enumerate(self.columns)
            ]
            if positions:
                values.append(rows.c.key.label("position"))
            return sa.select(*values).select_from(rows).cte(self.name)
        bound = [
            sa.cast(sa.bindparam(f"{self.name}_{c.name}"), ARRAY(self._array_type(c)))
            for c in self.columns
        ]
        unnested = (
            sa.func.unnest(*bound)
            .table_valued(
                *(c.name for c in self.columns), with_ordinality="position" if positions else None
            )
            .render_derived(name=f"{self.name}_rows")
        )
        return sa.select(*unnested.c).cte(self.name)

    def params(self, rows: Sequence[Sequence[Any]], arrays: bool) -> dict[str, Any]:
        """The parameters for ``rows``. Arrays hold text (JSON values as JSON text), cast by
        the statement: psycopg refuses a list mixing ints and floats, and types a list of ints
        by its largest (``int2[]`` …), so values as they come would make several prepared
        statements of one text, or none."""
        if not arrays:
            if self._json_texts:
                rows = [self._with_json_text(row) for row in rows]
            # refuses NUL and lone surrogates, as PostgreSQL would: SQLite's JSON would end a
            # string at an escaped NUL, a cut no parameter of its own would make
            return {self.name: dumps(rows)}
        return {
            key: [row[i] for row in rows] if to_text is None else [to_text(row[i]) for row in rows]
            for i, (key, to_text) in enumerate(self._array_texts)
        }

    @cached_property
    def _json_texts(self) -> tuple[tuple[int, ToText], ...]:
        """Each JSON column's place, and how its value becomes its text: None is SQL ``NULL``
        where the column's type says so (``none_as_null``), else JSON ``null``, as SQLAlchemy
        binds it."""
        return tuple(
            (i, _json_or_null if getattr(c.type, "none_as_null", False) else dumps)
            for i, c in enumerate(self.columns)
            if isinstance(c.type, sa.JSON)
        )

    @cached_property
    def _array_texts(self) -> tuple[tuple[str, ToText | None], ...]:
        """Each column's array parameter, and how its values become text (None: they are)."""
        json = dict(self._json_texts)
        return tuple(
            (
                f"{self.name}_{c.name}",
                json.get(i) or (None if isinstance(c.type, sa.Text) else _text),
            )
            for i, c in enumerate(self.columns)
        )

    @staticmethod
    def _array_type(column: sa.ColumnClause[Any]) -> Any:
        return sa.Text() if isinstance(column.type, sa.JSON) else column.type

    def _with_json_text(self, row: Sequence[Any]) -> list[Any]:
        values = list(row)
        for i, to_text in self._json_texts:
            values[i] = to_text(values[i])
        return values


def _json_or_null(value: Any) -> str | None:
    return None if value is None else dumps(value)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
