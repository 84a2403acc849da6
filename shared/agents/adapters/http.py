"""HTTP for model adapters: auth header sources and one streaming POST."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from tether.jsonvalue import dumps

if TYPE_CHECKING:
    from databricks.sdk.config import Config

USER_AGENT = "tether-agents/0.1"


class HttpStatusError(Exception):
    """A non-2xx reply. Only the status is kept; the body is never read into a message."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class AuthSource(Protocol):
    """Where the base URL and fresh auth headers of a model endpoint come from."""

    base_url: str

    async def headers(self) -> dict[str, str]: ...


class DatabricksAuth:
    """databricks-sdk's credential chain (PAT, OAuth, profiles, env), headers fetched per call."""

    def __init__(self, config: Config | None = None) -> None:
        if config is None:
            from databricks.sdk.config import Config

            config = Config()
        host = config.host
        if not host:
            raise ValueError("databricks-sdk Config has no host (set DATABRICKS_HOST or a profile)")
        self.config = config
        self.base_url = host.rstrip("/")

    async def headers(self) -> dict[str, str]:
        # authenticate() may refresh an OAuth token with blocking I/O, so keep it off the loop.
        return dict(await asyncio.to_thread(self.config.authenticate))


class BearerAuth:
    """A fixed API key for any OpenAI-compatible endpoint."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key

    async def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}


async def post_stream(
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    connect_timeout_s: float = 30.0,
) -> AsyncGenerator[bytes, None]:
    """POST JSON and yield the raw response body as it arrives; raises HttpStatusError."""
    all_headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "User-Agent": USER_AGENT,
        **headers,
    }
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(url, data=dumps(dict(body)), headers=all_headers) as response,
    ):
        if not 200 <= response.status < 300:
            raise HttpStatusError(response.status)
        async for chunk in response.content.iter_any():
            yield chunk
