"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes import embedded_store
from tether.store.store import Store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """The embedded store on a fresh SQLite file, migrated (a test module may override it)."""
    async with embedded_store(Store, tmp_path) as s:
        yield s
