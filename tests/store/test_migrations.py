"""Migrations produce the schema the code's table definitions expect, on both dialects."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.store.rows import until_a_lock_wait
from tether.store.dialect import MIGRATION_LOCK_KEY
from tether.store.migrate import (
    FILE_NAME,
    MIGRATIONS_ENV,
    applied_versions,
    find_migrations,
    migrations_dir,
    split_statements,
)
from tether.store.schema import metadata
from tether.store.store import Store


def test_migration_files_are_named_and_numbered_consistently() -> None:
    for dialect in ("postgresql", "sqlite"):
        files = sorted(p.name for p in (migrations_dir() / dialect).iterdir())
        assert files and all(FILE_NAME.match(f) for f in files), files
    versions = {d: [m.version for m in find_migrations(d)] for d in ("postgresql", "sqlite")}
    assert versions["postgresql"] == versions["sqlite"]


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
async def test_migrations_yield_the_expected_tables_and_columns(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if dialect == "sqlite":
        store = Store.embedded(str(tmp_path / "m.db"))
    else:
        from tests.services import PG_ADMIN_URL, create_database, drop_database, require

        require(PG_ADMIN_URL, 5432, "PostgreSQL")
        url = create_database()
        request.addfinalizer(lambda: drop_database(url))
        store = Store.postgres(url, pool_size=1)
    try:
        first = await store.migrate()
        assert first == [m.version for m in find_migrations(store.dialect)]
        assert await store.migrate() == []  # the ledger remembers
        assert await applied_versions(store.engine) == first
        async with store.engine.connect() as conn:
            actual = await conn.run_sync(
                lambda c: {
                    t: {col["name"] for col in sa.inspect(c).get_columns(t)}
                    for t in metadata.tables
                }
            )
            beaten = await conn.run_sync(
                lambda c: [
                    i["name"]
                    for i in sa.inspect(c).get_indexes("tether_invocations")
                    if "heartbeat_at" in i["column_names"]
                ]
            )
        for name, table in metadata.tables.items():
            assert actual[name] == {c.name for c in table.columns}, name
        # an index on heartbeat_at would make every beat write all of the row's index entries
        # anew (on PostgreSQL no update of an indexed column is HOT): migration 0010
        assert beaten == []
    finally:
        await store.close()


def test_a_dollar_quoted_body_is_one_statement_with_its_semicolons() -> None:
    sql = (
        "CREATE TABLE a (x int);\n"
        "DO $$ BEGIN IF true THEN ALTER TABLE a ADD y int; END IF; END $$;\n"
        "DO $body$ BEGIN PERFORM 1; END $body$;\n"
        "SELECT '$ alone;' AS s;"
    )
    assert split_statements(sql) == [
        "CREATE TABLE a (x int)",
        "DO $$ BEGIN IF true THEN ALTER TABLE a ADD y int; END IF; END $$",
        "DO $body$ BEGIN PERFORM 1; END $body$",
        "SELECT '$ alone",  # quotes are not parsed: a ';' inside one still splits (none does)
        "' AS s",
    ]
    assert split_statements("DO $$ unclosed; body") == ["DO $$ unclosed; body"]
    assert split_statements("  ;\n; ") == []


HAS_LZ4 = sa.text(
    "SELECT coalesce(bool_or('lz4' = ANY (enumvals)), false) FROM pg_settings "
    "WHERE name = 'default_toast_compression'"
)
LZ4_COLUMNS = {
    ("tether_invocations", "input"),
    ("tether_invocations", "output"),
    ("tether_invocations", "checkpoint"),
    ("tether_events", "data"),
    ("tether_steps", "result"),
    ("tether_waits", "details"),
    ("tether_waits", "value"),
    ("tether_thread_messages", "content"),
}


async def test_large_values_are_compressed_with_lz4_where_the_server_has_it(
    request: pytest.FixtureRequest,
) -> None:
    """Migration 0013: every column that holds an agent's large values, and no other."""
    from tests.services import PG_ADMIN_URL, create_database, drop_database, require

    require(PG_ADMIN_URL, 5432, "PostgreSQL")
    url = create_database()
    request.addfinalizer(lambda: drop_database(url))
    store = Store.postgres(url, pool_size=1)
    try:
        await store.migrate()
        async with store.engine.connect() as conn:
            has_lz4 = await conn.scalar(HAS_LZ4)
            rows = await conn.execute(
                sa.text(
                    "SELECT c.relname, a.attname FROM pg_attribute a "
                    "JOIN pg_class c ON c.oid = a.attrelid "
                    "WHERE c.relname LIKE 'tether_%' AND a.attcompression = 'l'"
                )
            )
            compressed = {(r.relname, r.attname) for r in rows}
        assert compressed == (LZ4_COLUMNS if has_lz4 else set())
    finally:
        await store.close()


async def test_without_lz4_migration_0013_leaves_every_column_as_it_was(
    request: pytest.FixtureRequest,
) -> None:
    """0013's other branch, on this server: a ``pg_settings`` that lists no lz4 (a view put
    before ``pg_catalog`` on the search path, as on a server built without it) leaves every
    column's compression as it was; the real one sets them again."""
    from tests.services import PG_ADMIN_URL, create_database, drop_database, require

    require(PG_ADMIN_URL, 5432, "PostgreSQL")
    url = create_database()
    request.addfinalizer(lambda: drop_database(url))
    store = Store.postgres(url, pool_size=1)
    (toast,) = [m for m in find_migrations("postgresql") if m.version == "0013"]
    lz4 = sa.text(
        "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "WHERE c.relname LIKE 'tether_%' AND a.attcompression = 'l'"
    )
    try:
        await store.migrate()
        async with store.engine.begin() as conn:
            for table, column in sorted(LZ4_COLUMNS):
                await conn.execute(
                    sa.text(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION default")
                )
            await conn.execute(sa.text("CREATE SCHEMA without_lz4"))
            await conn.execute(
                sa.text(
                    "CREATE VIEW without_lz4.pg_settings AS SELECT name, "
                    "array_remove(enumvals, 'lz4') AS enumvals FROM pg_catalog.pg_settings"
                )
            )
            await conn.execute(sa.text("SET LOCAL search_path = without_lz4, pg_catalog, public"))
            for statement in toast.statements():
                await conn.exec_driver_sql(statement, execution_options={"no_parameters": True})
            assert {tuple(r) for r in await conn.execute(lz4)} == set()
        async with store.engine.begin() as conn:  # search_path back to the default
            for statement in toast.statements():
                await conn.exec_driver_sql(statement, execution_options={"no_parameters": True})
            expected = LZ4_COLUMNS if await conn.scalar(HAS_LZ4) else set()
            assert {tuple(r) for r in await conn.execute(lz4)} == expected
    finally:
        await store.close()


async def test_a_do_block_with_semicolons_and_a_percent_runs_as_one_statement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """A migration is run as written: a ``DO`` body whole, and ``%`` no parameter placeholder."""
    from tests.services import PG_ADMIN_URL, create_database, drop_database, require

    require(PG_ADMIN_URL, 5432, "PostgreSQL")
    folder = tmp_path / "postgresql"
    folder.mkdir()
    (folder / "0001_block.sql").write_text(
        "CREATE TABLE probe (n int);\n"
        "DO $$\nBEGIN\n  RAISE NOTICE 'at %', 1;\n  INSERT INTO probe VALUES (7);\nEND\n$$;\n"
    )
    monkeypatch.setenv(MIGRATIONS_ENV, str(tmp_path))
    url = create_database()
    request.addfinalizer(lambda: drop_database(url))
    store = Store.postgres(url, pool_size=1)
    try:
        assert await store.migrate() == ["0001"]
        async with store.engine.connect() as conn:
            assert await conn.scalar(sa.text("SELECT n FROM probe")) == 7
    finally:
        await store.close()


async def test_a_database_a_newer_release_migrated_is_said_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It is served (readers ignore what they do not know), but an older release's writes may be
    refused by a rule the newer added: the log says why at start, not only a 422 later."""
    store = Store.embedded(str(tmp_path / "m.db"))
    try:
        await store.migrate()
        assert "does not know" not in caplog.text
        async with store.engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO tether_schema_migrations (version, name, applied_at) "
                    "VALUES ('9999', '9999_later.sql', CURRENT_TIMESTAMP)"
                )
            )
        assert await store.migrate() == []
        assert "holds migrations this release does not know (9999)" in caplog.text
    finally:
        await store.close()


async def test_runs_at_once_on_a_fresh_database_take_turns_from_the_ledger_on(
    request: pytest.FixtureRequest,
) -> None:
    """Replicas' ``tether migrate`` at once on an empty database: the ledger's ``CREATE TABLE IF
    NOT EXISTS`` is behind the migration lock too, else the second waits on the first's catalog
    row and then fails on it (``pg_type_typname_nsp_index``) instead of finding the table."""
    import psycopg

    from tests.services import PG_ADMIN_URL, create_database, drop_database, require

    require(PG_ADMIN_URL, 5432, "PostgreSQL")
    url = create_database()
    request.addfinalizer(lambda: drop_database(url))
    store = Store.postgres(url, pool_size=1)
    dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
    try:
        async with (
            await psycopg.AsyncConnection.connect(dsn) as first,  # a run mid-way
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as probe,
        ):
            await first.execute(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")
            await first.execute(
                "CREATE TABLE tether_schema_migrations "
                "(version TEXT PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            racing = asyncio.create_task(store.migrate())
            await until_a_lock_wait(probe, what="the first run")
            await first.commit()
            applied = await racing
        assert applied == [m.version for m in find_migrations("postgresql")]
    finally:
        await store.close()
