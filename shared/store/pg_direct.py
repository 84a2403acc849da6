"""The store's PostgreSQL statements, compiled by SQLAlchemy once and run on psycopg directly.

SQLAlchemy's asyncio layer costs more than the statement: each ``execute`` goes through a greenlet
switch, the driver adapter's cursor, the execution context and the result's metadata, and comes
back. For the gateway's status read (``Invocations.get_many``, 32 ids) that was 0.29 ms of the
client's CPU against 0.09 ms for the same text on psycopg's own connection, and the store's hot
statements are all of that kind: built once (module-level or ``functools.cache``), every batch bound
as the same few parameters (:mod:`.bound`). So :class:`DirectConnection`, what
:class:`.engine.Database` lends on PostgreSQL, compiles each statement once (a :class:`Plan`, cached
by the statement object), binds its parameters as SQLAlchemy does (``construct_params``, then each
type's bind processor: a JSON value's, an array's), and sends the text on the psycopg connection of
the same SQLAlchemy connection: the transaction, the pool, the isolation level and the prepared
statements are SQLAlchemy's and psycopg's as before. Rows come back as named tuples (:class:`Rows`
has the part of SQLAlchemy's result the store uses), each value through the column type's result
processor where SQLAlchemy has one for that database type (chosen from the first result's type
OIDs).

A statement takes SQLAlchemy's own path, unchanged, where this would not be the same statement or
would cost more: on its first run (one built anew for every call never gets a plan: SQLAlchemy
caches its compiled form by structure, this by object; the objects seen once are held weakly, as a
one-off statement holds its values, a checkpoint's or an input's), a ``text()`` that names its
columns only in its result, execution options on the statement, the call or the connection
(beyond the isolation level and read-only flag :class:`.engine.Database` sets), expanding or
literal parameters (rendered per execution), Python-side column defaults, columns a named tuple
would rename (``pass``, ``count``, a duplicate), several parameter sets for a statement that
returns rows; and every statement does while anything listens to the engine's statement events
(``before_cursor_execute``: tests that count statements, tracing), so that they see all of them.
Driver errors are raised as SQLAlchemy raises them (:class:`sqlalchemy.exc.DBAPIError`, without
parameters), so :func:`.errors.wrapped` maps them the same way; on a lost connection, as
SQLAlchemy does, the connection is invalidated and every connection the pool held before it is
replaced at its next checkout (a restarted server costs one failed request, not one per pooled
connection).
"""

from __future__ import annotations

import collections
import keyword
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine.interfaces import (
    CoreExecuteOptionsParameter,
    _CoreAnyExecuteParams,
    _CoreSingleExecuteParams,
)
from sqlalchemy.ext.asyncio import AsyncConnection

MAX_PLANS = 1_000
"""Plans kept; past it the cache starts over. Only statements run twice get one, so these are
the store's statements built once (module-level, ``functools.cache``), a bounded set."""

Processor = Callable[[Any], Any] | None

CONNECTION_OPTIONS = frozenset({"isolation_level", "postgresql_readonly"})
"""The execution options a connection may carry and still run statements directly: the ones
:class:`.engine.Database` sets, which act on the psycopg connection itself."""


@dataclass(slots=True)
class Plan:
    """One statement's text for psycopg, and how its parameters and rows are made."""

    compiled: Any  # sqlalchemy's SQLCompiler
    sql: str
    keys: tuple[str, ...]
    types: tuple[Any, ...]
    binds: dict[str, Callable[[Any], Any]]  # the parameters SQLAlchemy processes, by name
    processors: tuple[Processor, ...] | None = None  # set from the first result's type OIDs
    named_by_result: bool = False  # a text(): its keys come with its first result
    retired: bool = False  # those keys would not make a named tuple: SQLAlchemy's path from now

    def params(self, parameters: Mapping[str, Any] | None) -> dict[str, Any]:
        """The statement's parameters, as SQLAlchemy binds them: each one its statement holds
        or the caller gave, through its type's bind processor if it has one."""
        params: dict[str, Any] = self.compiled.construct_params(parameters)
        for name, process in self.binds.items():
            if name in params:
                params[name] = process(params[name])
        return params

    def rows(self, cursor: Any, rows: list[tuple[Any, ...]], dialect: Any) -> list[Any]:
        if self.processors is None:
            description = cursor.description or []
            if self.named_by_result:
                self.keys = tuple(column.name for column in description)
                self.types = tuple(sa.types.NULLTYPE for _ in description)
                self.retired = not plain_names(self.keys)
            self.processors = tuple(
                type_._cached_result_processor(dialect, column.type_code)
                for type_, column in zip(self.types, description, strict=True)
            )
        processors = self.processors
        if not any(processors):
            return rows
        return [
            tuple(v if p is None else p(v) for p, v in zip(processors, row, strict=True))
            for row in rows
        ]


Key = tuple[int, tuple[str, ...]]
_PLANS: dict[Key, tuple[sa.ClauseElement, Plan | None]] = {}
"""By the statement's id and an insert's or update's column keys: the statement (held, so that
its id is not reused while cached) and its plan."""
_SEEN: weakref.WeakValueDictionary[Key, sa.ClauseElement] = weakref.WeakValueDictionary()
"""Statements run once, while they live (not kept alive: a one-off statement holds its values,
a checkpoint's, an input's)."""
_LOCK = threading.Lock()
"""Around the caches' changes: each thread with a loop of its own (a worker's heartbeat) runs
statements too."""


def plan_for(
    statement: sa.Executable, parameters: Mapping[str, Any] | None, dialect: sa.Dialect
) -> Plan | None:
    """The statement's plan (None: it takes SQLAlchemy's path). A statement built anew for each
    call gets none: compiling it every time would cost more than SQLAlchemy's path, whose
    compiled cache goes by the statement's structure. An insert's or update's text depends on
    the columns its parameters name, as SQLAlchemy compiles it."""
    if not isinstance(statement, sa.ClauseElement):
        return None
    dml = isinstance(statement, sa.sql.dml.ValuesBase)
    column_keys = tuple(sorted(parameters)) if dml and parameters else ()
    key = (id(statement), column_keys)
    cached = _PLANS.get(key)
    if cached is not None and cached[0] is statement:
        plan = cached[1]
        return None if plan is None or plan.retired else plan
    with _LOCK:
        if _SEEN.get(key) is not statement:  # the first run of this statement object
            _SEEN[key] = statement
            return None
        _SEEN.pop(key, None)
    plan = _compile(statement, list(column_keys), dialect)
    with _LOCK:
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = (statement, plan)
    return plan


def _compile(
    statement: sa.ClauseElement, column_keys: list[str], dialect: sa.Dialect
) -> Plan | None:
    if isinstance(statement, sa.Executable) and statement.get_execution_options():
        return None
    compiled: Any = statement.compile(dialect=dialect, column_keys=column_keys)
    if (
        compiled.literal_execute_params
        or compiled.post_compile_params
        or compiled.escaped_bind_names
        or compiled.insert_prefetch
        or compiled.update_prefetch
    ):
        return None
    binds = {name: p for name, p in compiled._bind_processors.items() if p is not None}
    columns = compiled._result_columns
    keys = tuple(column[0] for column in columns)
    if not plain_names(keys):
        return None
    named_by_result = isinstance(statement, sa.TextClause)
    types = tuple(c[3] for c in columns)
    return Plan(compiled, compiled.string, keys, types, binds, named_by_result=named_by_result)


def plain_names(keys: tuple[str, ...]) -> bool:
    """Column keys a named tuple keeps as they are, distinct, none shadowed by a tuple attribute
    (``count``): rows of them behave as SQLAlchemy's do."""
    return len(set(keys)) == len(keys) and all(
        k.isidentifier()
        and not keyword.iskeyword(k)
        and not k.startswith("_")
        and k not in _TUPLE_ATTRIBUTES
        for k in keys
    )


_TUPLE_ATTRIBUTES = frozenset(dir(tuple))


@cache
def _row_class(keys: tuple[str, ...]) -> type[tuple[Any, ...]]:
    return collections.namedtuple("Row", keys, rename=True)  # renames only a retired text's


class Rows:
    """A statement's rows and row count: the part of SQLAlchemy's result the store uses."""

    __slots__ = ("_keys", "_rows", "rowcount")

    def __init__(self, keys: tuple[str, ...], rows: list[tuple[Any, ...]], rowcount: int) -> None:
        self._keys = keys
        self._rows = rows
        self.rowcount = rowcount

    def all(self) -> list[Any]:
        row = _row_class(self._keys)
        return [row(*values) for values in self._rows]

    fetchall = all

    def __iter__(self) -> Iterator[Any]:
        return iter(self.all())

    def first(self) -> Any:
        return _row_class(self._keys)(*self._rows[0]) if self._rows else None

    def one(self) -> Any:
        if len(self._rows) != 1:
            raise sa.exc.NoResultFound if not self._rows else sa.exc.MultipleResultsFound
        return self.first()

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalars(self) -> Items:
        return Items([values[0] for values in self._rows])

    def mappings(self) -> Items:
        keys = self._keys
        return Items([dict(zip(keys, values, strict=True)) for values in self._rows])


class Items:
    """Rows as mappings, or one column's values."""

    __slots__ = ("_items",)

    def __init__(self, items: list[Any]) -> None:
        self._items = items

    def all(self) -> list[Any]:
        return self._items

    def first(self) -> Any:
        return self._items[0] if self._items else None

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)


class DirectConnection:
    """A SQLAlchemy connection whose statements run on its psycopg connection (module doc)."""

    __slots__ = ("_conn", "_direct", "_driver")

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn
        self._driver: psycopg.AsyncConnection[Any] | None = None
        options = conn.sync_connection.get_execution_options() if conn.sync_connection else {}
        self._direct = options.keys() <= CONNECTION_OPTIONS

    async def execute(
        self,
        statement: sa.Executable,
        parameters: _CoreAnyExecuteParams | None = None,
        *,
        execution_options: CoreExecuteOptionsParameter | None = None,
    ) -> Any:
        conn = self._conn
        plan = None
        if (
            self._direct
            and not execution_options
            and not conn.sync_engine.dispatch.before_cursor_execute
        ):
            plan = plan_for(statement, _first(parameters), conn.dialect)
        if plan is None or not _fits(plan, parameters):
            return await conn.execute(statement, parameters, execution_options=execution_options)
        driver: Any = self._driver
        if driver is None:
            driver = self._driver = (await conn.get_raw_connection()).driver_connection
        try:
            if parameters is None or isinstance(parameters, Mapping):
                cursor = await driver.execute(plan.sql, plan.params(parameters))
            else:  # several parameter sets, no rows back: psycopg sends them in one pipeline
                cursor = driver.cursor()
                await cursor.executemany(plan.sql, [plan.params(p) for p in parameters])
            result = cursor.pgresult
            if result is not None and result.nfields:
                rows = plan.rows(cursor, await cursor.fetchall(), conn.dialect)
            else:
                rows = []
        except psycopg.Error as exc:
            error: Any = exc
            lost = conn.dialect.is_disconnect(error, driver, None)
            if lost:  # as SQLAlchemy does: every connection of the pool older than this one
                pooled: Any = await conn.get_raw_connection()  # is replaced at its checkout
                conn.sync_engine.pool._invalidate(pooled, exc, _checkin=False)
                await conn.invalidate(exc)
            raise sa.exc.DBAPIError.instance(
                plan.sql,
                None,
                exc,
                psycopg.Error,
                hide_parameters=True,
                connection_invalidated=lost,
            ) from None
        return Rows(plan.keys, rows, cursor.rowcount)

    async def scalar(
        self,
        statement: sa.Executable,
        parameters: _CoreSingleExecuteParams | None = None,
        *,
        execution_options: CoreExecuteOptionsParameter | None = None,
    ) -> Any:
        result = await self.execute(statement, parameters, execution_options=execution_options)
        return result.scalar()

    async def get_raw_connection(self) -> Any:
        """The pool's connection (its ``driver_connection`` is psycopg's)."""
        return await self._conn.get_raw_connection()


def _first(parameters: _CoreAnyExecuteParams | None) -> Mapping[str, Any] | None:
    """The parameter set the statement is compiled for: the only one, or the first of several."""
    if parameters is None or isinstance(parameters, Mapping):
        return parameters
    return parameters[0] if parameters else None


def _fits(plan: Plan, parameters: _CoreAnyExecuteParams | None) -> bool:
    """Whether the plan runs these parameters as SQLAlchemy would: one set; or several, naming
    the same columns, for a statement that returns no rows (SQLAlchemy would send an insert's as
    one statement of many ``VALUES``, psycopg sends one statement a set, in one pipeline)."""
    if parameters is None or isinstance(parameters, Mapping):
        return True
    if not parameters or plan.keys:
        return False
    names = parameters[0].keys()
    return all(p.keys() == names for p in parameters)
