"""Batches as one bound parameter, so a batch's SQL text is the same for every batch size.

A batch is one JSON array of rows, each row an array of its values, taken apart by the database
in C: PostgreSQL's ``jsonb_array_elements`` and ``->>`` (each value cast to its column's type;
``->`` for a JSON column's, below), SQLite's ``json_each`` and ``json_extract`` (``->`` for a
JSON column's from SQLite 3.38). The statement's
text is the same for every batch, so SQLAlchemy compiles it once and psycopg prepares it once it
has seen it five times, and a batch binds the same two parameters whatever its size: the rows,
and their count (PostgreSQL's statement holds it as a ``LIMIT`` that keeps every row, for the
planner: :meth:`BoundBatch.cte`). A batch past the database's limit for one value (PostgreSQL's
``jsonb``: 256 MB, SQLSTATE 54000; SQLite's string length: 1 GB by default) is refused as a
value (:class:`.errors.ValueRefused`), and :mod:`.batching` writes its items one at a time.

PostgreSQL got one array per column, unnested, until 2026-12-05: psycopg builds a text array's
literal in Python, escaping every element with a regular expression and a callback per quote,
and a JSON value is all quotes. For 14 events (``bench``'s no-op: a ``run.started`` each) that
was 280 us of the client's CPU per statement against 74 us for one ``jsonb`` parameter, the
server's 75-85 us against 65-70 us. SQLite used to get a ``UNION ALL`` of one-row ``SELECT``s of
bound parameters, a parameter per value, each passing through SQLAlchemy's binding (about a
sixth of a store transaction's CPU in ``tether dev``); PostgreSQL must not get that form either:
it plans a ``UNION ALL`` of 128 one-row ``SELECT``s in ~28 ms.

A JSON column's values travel as JSON inside the batch (:class:`Carriage`): the database parses
the batch once and takes each one out as JSON (``->``: PostgreSQL's gives ``jsonb``, SQLite's
the value's text as it stands in the batch), and a value encoded already
(:class:`~tether.jsonvalue.JsonText`) is spliced into the batch's text as it is. Until
2026-12-07 they travelled as strings holding their text, as they still do on a SQLite older than
3.38, which has no ``->`` (its ``json_extract`` gives a JSON string or boolean back as a plain
value): the client escaped each value's text again inside the batch's (a 67 kB conversation:
~0.4 ms, 14 % of its accept's CPU on PostgreSQL) and the database un-escaped it again (PostgreSQL
then parsed it as JSON a second time: 6 % of its insert). SQLite's ``json_each`` parses a value
carried as JSON to its depth, which is bounded (1,000 levels from SQLite 3.45, 2,000 before): a
value nested deeper is refused as a value (:mod:`.errors`), and :mod:`.batching` writes the rest
of its batch without it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from tether.jsonvalue import JsonText, dumps


class Carriage(enum.Enum):
    """How a database takes a batch apart (its dialect's :attr:`~.dialect.Dialect.carriage`)."""

    JSONB = "jsonb"
    """PostgreSQL: ``jsonb_array_elements``, each value ``->>`` as text cast to its column's
    type, a JSON column's ``->`` as ``jsonb``."""
    SQLITE_JSON = "sqlite-json"
    """SQLite 3.38 and newer: ``json_each``, each value ``json_extract``, a JSON column's
    ``->`` as its JSON text."""
    SQLITE_TEXT = "sqlite-text"
    """Older SQLite: ``json_each`` and ``json_extract``; a JSON column's value travels as a
    string holding its text."""

    @property
    def json_values(self) -> bool:
        """Whether a JSON column's value travels as JSON (spliced as it is when encoded)."""
        return self is not Carriage.SQLITE_TEXT


def padded(count: int) -> int:
    """``count`` rounded up to a power of two: few statement shapes, each compiled once."""
    return 1 << (max(count, 1) - 1).bit_length()


@dataclass(frozen=True)
class BoundBatch:
    """Rows of ``columns`` as a CTE named ``name``, the elements of one JSON array. A statement
    holding :meth:`cte` is built once per database; :meth:`params` binds the rows."""

    name: str
    columns: tuple[sa.ColumnClause[Any], ...]

    def cte(self, carriage: Carriage, *, positions: bool = False) -> sa.CTE:
        """The batch's rows, taken apart as ``carriage`` says; with ``positions``, also each
        row's place in the batch (``position``, ascending in the order given) to order by."""
        batch = sa.bindparam(self.name, type_=sa.Text)
        if carriage is not Carriage.JSONB:
            rows = sa.func.json_each(batch).table_valued("value", "key")
            values = [
                _sqlite_value(rows.c.value, i, c, carriage).label(c.name)
                for i, c in enumerate(self.columns)
            ]
            if positions:
                values.append(rows.c.key.label("position"))
            return sa.select(*values).select_from(rows).cte(self.name)
        elements = sa.func.jsonb_array_elements(sa.cast(batch, JSONB)).table_valued(
            "value", with_ordinality="position" if positions else None
        )
        rows = elements.render_derived(name=f"{self.name}_rows")
        values = [_taken_out(rows.c.value, i, c).label(c.name) for i, c in enumerate(self.columns)]
        if positions:
            values.append(rows.c.position.label("position"))
        # the row count, as a LIMIT that keeps every row: PostgreSQL estimates a set-returning
        # function at 100 rows whatever it returns, and at 100 it joined a batch of five to
        # every active invocation by hash (1-7 ms at 4,000 active) instead of probing the key
        counted = sa.bindparam(self._count_name, type_=sa.Integer)
        return sa.select(*values).select_from(rows).limit(counted).cte(self.name)

    def params(self, rows: Sequence[Sequence[Any]], *, carriage: Carriage) -> dict[str, Any]:
        """The parameters for ``rows``, carried as :meth:`cte` with the same ``carriage`` takes
        them apart: refuses NUL and lone surrogates, as PostgreSQL would (SQLite's JSON would end
        a string at an escaped NUL, a cut no parameter of its own would make)."""
        count = len(rows)
        if not self._json_columns:
            text = dumps(rows)
        elif carriage.json_values:
            text = self._spliced(rows) if self._holds_json_text(rows) else dumps(rows)
        else:
            text = dumps([self._with_json_text(row) for row in rows])
        return {self.name: text, self._count_name: count}

    @property
    def _count_name(self) -> str:
        return f"{self.name}_count"

    @cached_property
    def _json_columns(self) -> tuple[tuple[int, bool], ...]:
        """Each JSON column's place, and whether None is SQL ``NULL`` there (``none_as_null``),
        else JSON ``null``, as SQLAlchemy binds it."""
        return tuple(
            (i, bool(getattr(c.type, "none_as_null", False)))
            for i, c in enumerate(self.columns)
            if isinstance(c.type, sa.JSON)
        )

    def _holds_json_text(self, rows: Sequence[Sequence[Any]]) -> bool:
        return any(isinstance(row[i], JsonText) for row in rows for i, _ in self._json_columns)

    def _spliced(self, rows: Sequence[Sequence[Any]]) -> str:
        """The batch's text, each :class:`JsonText` written into it as it is."""
        return "[" + ",".join(map(self._row_text, rows)) + "]"

    def _row_text(self, row: Sequence[Any]) -> str:
        parts: list[str] = []
        start = 0
        for i, _ in self._json_columns:
            if isinstance(row[i], JsonText):
                if i > start:
                    parts.append(dumps(list(row[start:i]))[1:-1])  # the values, no brackets
                parts.append(row[i])
                start = i + 1
        if start < len(row):
            parts.append(dumps(list(row[start:]))[1:-1])
        return "[" + ",".join(parts) + "]"

    def _with_json_text(self, row: Sequence[Any]) -> list[Any]:
        """``row`` with each JSON column's value as its text, SQL ``NULL`` where None is."""
        values = list(row)
        for i, none_as_null in self._json_columns:
            value = values[i]
            if none_as_null and (
                value is None or (isinstance(value, JsonText) and value == "null")
            ):
                values[i] = None
            elif not isinstance(value, JsonText):  # else encoded already, and checked
                values[i] = dumps(value)
        return values


def _taken_out(
    row: sa.ColumnElement[Any], i: int, column: sa.ColumnClause[Any]
) -> sa.ColumnElement[Any]:
    """PostgreSQL's value ``i`` of a batch's ``row``, as its column's type: a JSON column's as
    ``jsonb`` (``->``; JSON ``null`` is SQL ``NULL`` where the column says so), others as text
    (``->>``) cast to theirs."""
    place = sa.literal_column(str(i), sa.Integer)
    if not isinstance(column.type, sa.JSON):
        return _typed(row.op("->>")(place), column)
    value = sa.type_coerce(row.op("->")(place), JSONB)
    if getattr(column.type, "none_as_null", False):
        return sa.type_coerce(sa.func.nullif(value, sa.literal_column("'null'::jsonb")), JSONB)
    return value


def _sqlite_value(
    row: sa.ColumnElement[Any], i: int, column: sa.ColumnClause[Any], carriage: Carriage
) -> sa.ColumnElement[Any]:
    """SQLite's value ``i`` of a batch's ``row``, as its column's type: a JSON column's as its
    JSON text (``->``, SQL ``NULL`` for JSON ``null`` where the column says so) where the
    ``carriage`` carries it as JSON; else as ``json_extract`` gives it (a JSON column's: the
    string holding its text)."""
    path: sa.ColumnElement[str] = sa.literal_column(f"'$[{i}]'")
    if carriage is Carriage.SQLITE_TEXT or not isinstance(column.type, sa.JSON):
        return sa.type_coerce(sa.func.json_extract(row, path), column.type)
    text: sa.ColumnElement[Any] = row.op("->")(path)
    if getattr(column.type, "none_as_null", False):
        text = sa.func.nullif(text, sa.literal_column("'null'"))
    return sa.type_coerce(text, column.type)


def _typed(text: sa.ColumnElement[Any], column: sa.ColumnClause[Any]) -> sa.ColumnElement[Any]:
    """A value of a row, taken out as text (``->>``), as its column's type."""
    if isinstance(column.type, sa.String):
        return sa.type_coerce(text, sa.Text)
    return sa.cast(text, column.type)
