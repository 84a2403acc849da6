"""Engines for PostgreSQL (psycopg 3) and the embedded SQLite (aiosqlite)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from tether.jsonvalue import dumps


def create_engine(url: str | sa.URL, *, pool_size: int = 10) -> AsyncEngine:
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed)
    return create_async_engine(
        parsed,
        json_serializer=dumps,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_recycle=300,
    )


def _sqlite_engine(url: sa.URL) -> AsyncEngine:
    """One connection, WAL, and ``BEGIN IMMEDIATE`` so writers queue instead of failing."""
    engine = create_async_engine(
        url,
        json_serializer=dumps,
        pool_size=1,
        max_overflow=0,
        pool_timeout=60,
        connect_args={"timeout": 30},
    )

    @sa.event.listens_for(engine.sync_engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @sa.event.listens_for(engine.sync_engine, "begin")
    def on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
