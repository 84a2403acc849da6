"""HTTP for model adapters: auth header sources and one streaming POST, sent again when the
endpoint says it is busy for now (:data:`RETRIED_STATUSES`)."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import time
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import aiohttp

from tether.jsonvalue import dumps

if TYPE_CHECKING:
    from databricks.sdk.config import Config

log = logging.getLogger(__name__)
USER_AGENT = "tether-agents/0.1"
RETRIED_STATUSES = frozenset({408, 429, 502, 503, 504})
"""Answers that say the endpoint could not take the call now (a rate limit, a serving endpoint
scaling up, a gateway in front timing out) and that come before the model did any work: the
POST is sent again, at most :data:`MODEL_RETRIES` times. Any other status fails the turn."""
MODEL_RETRIES = 3
FIRST_BACKOFF = 0.5
"""Seconds before the first retry when the answer has no ``Retry-After``; doubled each time,
with jitter (0.5, 1, 2 s on average)."""
MAX_RETRY_AFTER = 30.0
"""The longest ``Retry-After`` waited for: an endpoint that asks for longer fails the turn at
once, rather than hold the run for a wait it would likely answer the same way."""


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


def retry_delay(retry: int, retry_after: str | None) -> float | None:
    """Seconds to wait before retry number ``retry`` (from 0): the answer's ``Retry-After``
    (seconds or an HTTP date) if it has one, else the backoff; None when it asks for more than
    :data:`MAX_RETRY_AFTER`."""
    asked = _seconds_asked(retry_after) if retry_after else None
    if asked is None:
        return float(FIRST_BACKOFF * 2**retry * random.uniform(0.5, 1.5))  # noqa: S311 (jitter)
    return asked if asked <= MAX_RETRY_AFTER else None


def _seconds_asked(value: str) -> float | None:
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None  # unreadable: as if there were none
    if when.tzinfo is None:
        return None
    seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


async def post_stream(
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    connect_timeout_s: float = 30.0,
) -> AsyncGenerator[bytes, None]:
    """POST JSON and yield the raw response body as it arrives; raises HttpStatusError. An
    answer of :data:`RETRIED_STATUSES` is waited out and the POST sent again (the caller's
    deadline and abort bound the waits)."""
    all_headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "User-Agent": USER_AGENT,
        **headers,
    }
    data = dumps(dict(body))
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for retry in range(MODEL_RETRIES + 1):
            async with session.post(url, data=data, headers=all_headers) as response:
                status = response.status
                if 200 <= status < 300:
                    async for chunk in response.content.iter_any():
                        yield chunk
                    return
                delay = None
                if status in RETRIED_STATUSES and retry < MODEL_RETRIES:
                    delay = retry_delay(retry, response.headers.get("Retry-After"))
                if delay is None:
                    raise HttpStatusError(status)
            path = urlsplit(url).path
            log.info(
                "model endpoint %s answered %d: sending again in %.1f s (retry %d of %d)",
                path,
                status,
                delay,
                retry + 1,
                MODEL_RETRIES,
            )
            await asyncio.sleep(delay)
