"""Migrations produce the schema the code's table definitions expect, on both dialects."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from tether.store.migrate import FILE_NAME, applied_versions, find_migrations, migrations_dir
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
