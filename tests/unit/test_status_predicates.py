"""Status predicates are written into the SQL text in the partial indexes' own terms, so SQLite
uses those indexes (and never prepares a statement again because of a bound status)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from tether.store.schema import OPEN, TERMINAL_VALUES, invocations, status_is
from tether.store.store import Store

inv = invocations.c


def plan(path: Path, query: sa.Select[tuple[str]]) -> str:
    text = str(query.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))
    rows = sqlite3.connect(path).execute("EXPLAIN QUERY PLAN " + text).fetchall()
    return " | ".join(str(row[3]) for row in rows)


def test_only_statuses_reach_the_sql_text() -> None:
    with pytest.raises(ValueError):
        status_is(inv.status, "queued' OR '1'='1")
    text = str(status_is(inv.status, *OPEN).compile(dialect=sqlite.dialect()))
    assert text == "tether_invocations.status IN ('queued', 'active', 'waiting')"


@pytest.mark.parametrize(
    ("where", "index"),
    [
        (status_is(inv.status, *TERMINAL_VALUES), "tether_invocations_finished"),
        (status_is(inv.status, *OPEN), "tether_invocations_open_by_session"),
    ],
)
async def test_status_lists_match_their_partial_index(
    store: Store, tmp_path: Path, where: sa.ColumnElement[bool], index: str
) -> None:
    column = inv.finished_at if index.endswith("finished") else inv.owner
    probe = inv.finished_at < 5 if index.endswith("finished") else inv.owner == "ann"
    query = sa.select(inv.id).where(where, probe).order_by(column)
    assert f"USING INDEX {index}" in plan(tmp_path / "tether.db", query)
