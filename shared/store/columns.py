"""A batch of new rows as one array per column: one short ``INSERT … SELECT FROM unnest(…)``
whatever the batch's size, where the database can take arrays (PostgreSQL).

Handed to ``executemany``, SQLAlchemy renders a multi-row ``VALUES`` as long as the batch, whose
text psycopg parses again on every execution (texts that long skip its cache) and PostgreSQL
cannot reuse: that parse was a tenth of the gateway's CPU under a burst of accepts. Here the
text is the same for every batch, so it is parsed once and prepared by the server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from tether.jsonvalue import dumps


@dataclass(frozen=True)
class ColumnInsert:
    """``INSERT INTO table (names…, stamped…) SELECT … FROM unnest(:name…) … ON CONFLICT (key)
    DO NOTHING``, rows in the order given; ``stamped`` columns get ``now``."""

    statement: sa.Insert
    names: tuple[str, ...]
    json: frozenset[str]

    @classmethod
    def build(
        cls,
        table: sa.Table,
        key: str,
        names: Sequence[str],
        stamped: Sequence[str],
        now: sa.ColumnElement[float],
    ) -> ColumnInsert:
        json = frozenset(n for n in names if isinstance(table.c[n].type, sa.JSON))
        arrays = [
            sa.cast(sa.bindparam(n), ARRAY(sa.Text() if n in json else table.c[n].type))
            for n in names
        ]
        rows = (
            sa.func.unnest(*arrays)
            .table_valued(*names, with_ordinality="position")
            .render_derived(name="rows")
        )
        values = [sa.cast(rows.c[n], JSONB) if n in json else rows.c[n] for n in names]
        source = sa.select(*values, *[now for _ in stamped]).order_by(rows.c.position)
        statement = (
            postgresql.insert(table)
            .from_select([*names, *stamped], source)
            .on_conflict_do_nothing(index_elements=[key])
        )
        return cls(statement, tuple(names), json)

    def params(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
        """The arrays for ``rows`` (JSON values as their text, cast back by the statement)."""
        return {
            n: [dumps(row[n]) for row in rows] if n in self.json else [row[n] for row in rows]
            for n in self.names
        }
