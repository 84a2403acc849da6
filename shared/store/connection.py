"""What the store's statements run on: a PostgreSQL connection (:mod:`.pg_direct`) or the
embedded store's (:mod:`.sqlite_sync`), each running a statement's plan on its driver
(:mod:`.plans`) or handing it to SQLAlchemy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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


class ScalarOfExecute:
    """``scalar`` as the first value of ``execute``'s first row, for a connection whose
    ``execute`` is its own."""

    __slots__ = ()
    execute: Callable[..., Awaitable[Any]]

    async def scalar(
        self,
        statement: sa.Executable,
        parameters: _CoreSingleExecuteParams | None = None,
        *,
        execution_options: CoreExecuteOptionsParameter | None = None,
    ) -> Any:
        result = await self.execute(statement, parameters, execution_options=execution_options)
        return result.scalar()
