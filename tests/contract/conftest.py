from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.client import Api
from tests.openapi_check import open_session


@pytest.fixture
async def api(server: str) -> AsyncIterator[Api]:
    async with open_session(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield Api(session, server)
