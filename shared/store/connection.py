"""What the store's statements run on: an asynchronous SQLAlchemy connection (PostgreSQL), or a
synchronous one behind the same calls (the embedded SQLite store, :mod:`.sqlite_sync`)."""

from __future__ import annotations

from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import (
    CoreExecuteOptionsParameter,
    _CoreAnyExecuteParams,
    _CoreSingleExecuteParams,
)


class Connection(Protocol):
    async def execute(
        self,
        statement: sa.Executable,
        parameters: _CoreAnyExecuteParams | None = None,
        *,
        execution_options: CoreExecuteOptionsParameter | None = None,
    ) -> sa.CursorResult[*tuple[Any, ...]]: ...

    async def scalar(
        self,
        statement: sa.Executable,
        parameters: _CoreSingleExecuteParams | None = None,
        *,
        execution_options: CoreExecuteOptionsParameter | None = None,
    ) -> Any: ...
