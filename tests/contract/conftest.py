from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.client import Api


@pytest.fixture
async def api(server: str) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield Api(session, server)
