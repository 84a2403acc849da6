"""What a store's engine sends the database, for tests of its statements."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from sqlalchemy import event
from sqlalchemy.engine.default import CACHE_HIT

from tether.store.store import Store


class Executed(NamedTuple):
    text: str
    params: Any
    cached: bool
    """Whether SQLAlchemy took the statement's compiled form from its cache."""


@contextmanager
def statements(store: Store) -> Iterator[list[Executed]]:
    """The statements the store's engine runs meanwhile."""
    seen: list[Executed] = []

    def record(conn: Any, cursor: Any, text: str, params: Any, context: Any, many: bool) -> None:
        seen.append(Executed(text, params, context.cache_hit is CACHE_HIT))

    engines = store.db.statement_engines
    for engine in engines:
        event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", record)
