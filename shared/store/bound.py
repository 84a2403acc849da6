"""Batches as one bound parameter, so a batch's SQL text is the same for every batch size.

A batch is one JSON array of rows, each row an array of its values, taken apart by the database
in C: PostgreSQL's ``jsonb_array_elements`` and ``->>`` (each value cast to its column's type),
SQLite's ``json_each`` and ``json_extract``. The statement's text is the same for every batch, so
SQLAlchemy compiles it once and psycopg prepares it once it has seen it five times, and a batch
binds the same two parameters whatever its size: the rows, and their count (PostgreSQL's
statement holds it as a ``LIMIT`` that keeps every row, for the planner: :meth:`BoundBatch.cte`).
A batch past the database's limit for one value
(PostgreSQL's ``jsonb``: 256 MB, SQLSTATE 54000; SQLite's string length: 1 GB by default) is
refused as a value (:class:`.errors.ValueRefused`), and :mod:`.batching` writes its items one
at a time.

PostgreSQL got one array per column, unnested, until 2026-12-05: psycopg builds a text array's
literal in Python, escaping every element with a regular expression and a callback per quote,
and a JSON value is all quotes. For 14 events (``bench``'s no-op: a ``run.started`` each) that
was 280 us of the client's CPU per statement against 74 us for one ``jsonb`` parameter, the
server's 75-85 us against 65-70 us. SQLite used to get a ``UNION ALL`` of one-row ``SELECT``s of
bound parameters, a parameter per value, each passing through SQLAlchemy's binding (about a
sixth of a store transaction's CPU in ``tether dev``); PostgreSQL must not get that form either:
it plans a ``UNION ALL`` of 128 one-row ``SELECT``s in ~28 ms.

JSON values of a batch (a JSON column's) travel as their text, a string in the row; the statement
assigns that text to the JSON column it belongs to (:meth:`.dialect.Dialect.json`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from tether.jsonvalue import JsonText, dumps


def padded(count: int) -> int:
    """``count`` rounded up to a power of two: few statement shapes, each compiled once."""
    return 1 << (max(count, 1) - 1).bit_length()


ToText = Callable[[Any], str | None]
"""How a column's values become the text a batch carries them as."""


@dataclass(frozen=True)
class BoundBatch:
    """Rows of ``columns`` as a CTE named ``name``, the elements of one JSON array. A statement
    holding :meth:`cte` is built once per database; :meth:`params` binds the rows."""

    name: str
    columns: tuple[sa.ColumnClause[Any], ...]

    def cte(self, jsonb: bool, *, positions: bool = False) -> sa.CTE:
        """The batch's rows (``jsonb``: unpacked by PostgreSQL's functions, else SQLite's);
        with ``positions``, also each row's place in the batch (``position``, ascending in the
        order given) to order by."""
        batch = sa.bindparam(self.name, type_=sa.Text)
        if not jsonb:
            rows = sa.func.json_each(batch).table_valued("value", "key")
            values = [
                sa.type_coerce(
                    sa.func.json_extract(rows.c.value, sa.literal_column(f"'$[{i}]'")), c.type
                ).label(c.name)
                for i, c in enumerate(self.columns)
            ]
            if positions:
                values.append(rows.c.key.label("position"))
            return sa.select(*values).select_from(rows).cte(self.name)
        elements = sa.func.jsonb_array_elements(sa.cast(batch, JSONB)).table_valued(
            "value", with_ordinality="position" if positions else None
        )
        rows = elements.render_derived(name=f"{self.name}_rows")
        values = [
            _typed(rows.c.value.op("->>")(sa.literal_column(str(i), sa.Integer)), c).label(c.name)
            for i, c in enumerate(self.columns)
        ]
        if positions:
            values.append(rows.c.position.label("position"))
        # the row count, as a LIMIT that keeps every row: PostgreSQL estimates a set-returning
        # function at 100 rows whatever it returns, and at 100 it joined a batch of five to
        # every active invocation by hash (1-7 ms at 4,000 active) instead of probing the key
        counted = sa.bindparam(self._count_name, type_=sa.Integer)
        return sa.select(*values).select_from(rows).limit(counted).cte(self.name)

    def params(self, rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
        """The parameters for ``rows``: refuses NUL and lone surrogates, as PostgreSQL would
        (SQLite's JSON would end a string at an escaped NUL, a cut no parameter of its own
        would make)."""
        count = len(rows)
        if self._json_texts:
            rows = [self._with_json_text(row) for row in rows]
        return {self.name: dumps(rows), self._count_name: count}

    @property
    def _count_name(self) -> str:
        return f"{self.name}_count"

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

    def _with_json_text(self, row: Sequence[Any]) -> list[Any]:
        values = list(row)
        for i, to_text in self._json_texts:
            if not isinstance(values[i], JsonText):  # else encoded already, and checked
                values[i] = to_text(values[i])
        return values


def _json_or_null(value: Any) -> str | None:
    return None if value is None else dumps(value)


def _typed(text: sa.ColumnElement[Any], column: sa.ColumnClause[Any]) -> sa.ColumnElement[Any]:
    """A value of a row, taken out as text (``->>``), as its column's type: a JSON column's
    stays text (its JSON), as the statement assigns it (:meth:`.dialect.Dialect.json`)."""
    if isinstance(column.type, sa.String | sa.JSON):
        return sa.type_coerce(text, sa.Text)
    return sa.cast(text, column.type)
