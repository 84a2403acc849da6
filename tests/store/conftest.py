"""The store contract runs against the embedded SQLite store and real PostgreSQL alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tether.store.store import Store


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        s = Store.embedded(str(tmp_path / "store.db"))
        await s.migrate()
    else:
        url = request.getfixturevalue("migrated_pg")
        s = Store.postgres(url, pool_size=5)
        async with s.engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "TRUNCATE tether_invocations, tether_events, tether_steps, tether_waits, "
                    "tether_tenants, tether_global_limits, tether_tenant_buckets, "
                    "tether_tenant_passes, tether_claim_clock"
                )
            )
    try:
        yield s
    finally:
        await s.close()
