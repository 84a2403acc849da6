"""Statements compiled by SQLAlchemy once and run on the driver's own connection.

The store writes every statement once with SQLAlchemy Core, built once (module-level or
``functools.cache``) with every batch bound as the same few parameters (:mod:`.bound`). Executing
one through SQLAlchemy costs more than the statement: the compiled cache's lookup by structure,
the execution context, the result's metadata, and on PostgreSQL the asyncio layer's greenlet switch
and driver adapter. So each statement object gets a :class:`Plan` on its second run: its text
compiled once, its parameters bound as SQLAlchemy binds them (``construct_params``, then each
type's bind processor: a JSON value's, an array's), its rows returned as named tuples (:class:`Rows`
has the part of SQLAlchemy's result the store uses), each value through the column type's result
processor where SQLAlchemy has one for that database type (chosen from the first result, as
SQLAlchemy keeps it for a compiled statement). :mod:`.pg_direct` runs plans on psycopg,
:mod:`.sqlite_sync` on sqlite3; the transaction, the pool and the connection are SQLAlchemy's as
before.

A statement takes SQLAlchemy's own path, unchanged, where a plan would not be the same statement
or would cost more: on its first run (one built anew for every call never gets a plan: SQLAlchemy
caches its compiled form by structure, this by object; the objects seen once are held weakly, as a
one-off statement holds its values, a checkpoint's or an input's), execution options on the
statement, expanding or literal parameters (rendered per execution), Python-side column defaults,
columns a named tuple would rename (``pass``, ``count``, a duplicate; a ``text()``, which names
its columns only in its result, from its second result on), several parameter sets for a
statement that returns rows. The executors add theirs (options on the call or connection, and
anything listening to the engine's ``before_cursor_execute``, so that it sees every statement).
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

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import _CoreAnyExecuteParams

MAX_PLANS = 1_000
"""Plans kept; past it the cache starts over. Only statements run twice get one, so these are
the store's statements built once (module-level, ``functools.cache``), a bounded set."""

Processor = Callable[[Any], Any] | None


@dataclass(slots=True)
class Plan:
    """One statement's text for its driver, and how its parameters and rows are made."""

    compiled: Any  # sqlalchemy's SQLCompiler
    sql: str
    keys: tuple[str, ...]
    types: tuple[Any, ...]
    binds: dict[str, Callable[[Any], Any]]  # the parameters SQLAlchemy processes, by name
    processors: tuple[Processor, ...] | None = None  # from the first result's type codes
    named_by_result: bool = False  # a text(): its keys come with its first result
    retired: bool = False  # those keys would not make a named tuple: SQLAlchemy's path from now

    def params(self, parameters: Mapping[str, Any] | None) -> dict[str, Any] | list[Any]:
        """The statement's parameters, as SQLAlchemy binds them: each one its statement holds
        or the caller gave, through its type's bind processor if it has one; by name, or in
        order where the driver's parameters are positional (sqlite3's ``?``)."""
        params: dict[str, Any] = self.compiled.construct_params(parameters)
        for name, process in self.binds.items():
            if name in params:
                params[name] = process(params[name])
        positions = self.compiled.positiontup
        return params if positions is None else [params[name] for name in positions]

    def rows(
        self, describe: Callable[[], Any], rows: list[tuple[Any, ...]], dialect: Any
    ) -> list[Any]:
        """``rows`` as SQLAlchemy's result gives them; ``describe``: the cursor's description
        (DB-API: each column's name, then its type code), called the first time only (psycopg
        builds it anew on every call)."""
        if self.processors is None:
            description = describe() or []
            if self.named_by_result:
                self.keys = tuple(column[0] for column in description)  # DB-API: name, type
                self.types = tuple(sa.types.NULLTYPE for _ in description)
                self.retired = not plain_names(self.keys)
            self.processors = tuple(
                type_._cached_result_processor(dialect, column[1])
                for type_, column in zip(self.types, description, strict=True)
            )
        processors = self.processors
        if not any(processors):
            return rows
        return [
            tuple(v if p is None else p(v) for p, v in zip(processors, row, strict=True))
            for row in rows
        ]


Key = tuple[int, str, tuple[str, ...]]
_PLANS: dict[Key, tuple[sa.ClauseElement, Plan | None]] = {}
"""By the statement's id, the database's dialect (a process may hold stores of both) and an
insert's or update's column keys: the statement (held, so that its id is not reused while cached)
and its plan."""
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
    key = (id(statement), dialect.name, column_keys)
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


def runnable(
    statement: sa.Executable,
    parameters: _CoreAnyExecuteParams | None,
    dialect: sa.Dialect,
    *,
    sqlalchemy_only: bool,
) -> Plan | None:
    """The plan an executor runs for this call; None: SQLAlchemy's path (``sqlalchemy_only``,
    the executor's own reasons: execution options, a statement listener, its connection)."""
    if sqlalchemy_only:
        return None
    plan = plan_for(statement, _first(parameters), dialect)
    return plan if plan is not None and _fits(plan, parameters) else None


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
