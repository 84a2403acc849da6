"""Engines for PostgreSQL (psycopg 3) and the embedded SQLite (aiosqlite), and the one way the
store opens a connection: with the driver's errors wrapped (:mod:`tether.store.errors`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from tether.jsonvalue import dumps
from tether.store.dialect import Dialect, dialect_named
from tether.store.errors import wrapped


def create_engine(url: str | sa.URL, *, pool_size: int = 10) -> AsyncEngine:
    """``hide_parameters``: on a database error SQLAlchemy would otherwise log and raise the
    bound parameters of the whole statement, which for a group commit are other users' inputs."""
    parsed = sa.make_url(url)
    dialect = dialect_named(parsed.get_backend_name())
    engine = create_async_engine(
        parsed,
        json_serializer=dumps,
        hide_parameters=True,
        **dialect.engine_options(parsed, pool_size),
    )
    dialect.prepare(engine)
    return engine


def create_reader(url: str | sa.URL) -> AsyncEngine | None:
    """Connections for reads beside the writer's, where the database needs them: SQLite has one
    writer (``BEGIN IMMEDIATE``), and a read on the writer's connection waits behind every write
    queued there; in WAL mode a read transaction of its own sees every commit and blocks none.
    None for PostgreSQL, whose pool serves both."""
    parsed = sa.make_url(url)
    dialect = dialect_named(parsed.get_backend_name())
    options = dialect.reader_options(parsed)
    if options is None:
        return None
    engine = create_async_engine(parsed, json_serializer=dumps, hide_parameters=True, **options)
    dialect.prepare_reader(engine)
    return engine


@dataclass(frozen=True, slots=True)
class Database:
    """An engine and its dialect: what every part of the store queries through."""

    engine: AsyncEngine
    dialect: Dialect
    reader: AsyncEngine | None = None
    """Where :meth:`connection` reads, if not on ``engine`` (:func:`create_reader`)."""

    @classmethod
    def of(cls, engine: AsyncEngine, reader: AsyncEngine | None = None) -> Database:
        return cls(engine, dialect_named(engine.dialect.name), reader)

    @property
    def now(self) -> sa.ColumnElement[float]:
        return self.dialect.now

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """One transaction, committed when the block ends, rolled back if it raises."""
        with wrapped():
            async with self.engine.begin() as conn:
                yield conn

    @contextlib.asynccontextmanager
    async def autocommit(self) -> AsyncIterator[AsyncConnection]:
        """Each statement commits on its own: one round trip on PostgreSQL instead of three
        (``BEGIN``, the statement, ``COMMIT``), for writes that one statement makes whole. SQLite
        (one writer) gets one transaction."""
        if not self.dialect.autocommits:
            async with self.transaction() as conn:
                yield conn
            return
        with wrapped():
            async with self.engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                yield conn

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection]:
        """A connection for reads: the reader's where there is one (it writes nothing)."""
        with wrapped():
            async with (self.reader or self.engine).connect() as conn:
                yield conn
