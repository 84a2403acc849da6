"""``/metrics``: a bounded set of series whatever unauthenticated clients send, and no stale
value given as current while the database is down."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import generate_latest

from tests.inprocess import served
from tether.gateway.metrics import GatewayMetrics
from tether.gateway.tenant_limits import MAX_AGE
from tether.store.engine import Database
from tether.store.store import StoreUnavailable


def series(metrics: GatewayMetrics, name: str) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith(name + "{")]


def test_a_method_http_does_not_define_adds_no_series_of_its_own() -> None:
    """aiohttp's pure-Python parser (no C extension, or ``AIOHTTP_NO_EXTENSIONS``) accepts any
    token as a method and answers it 405: each name must not become a series."""
    metrics = GatewayMetrics()
    for i in range(50):
        metrics.answered(f"M{i}", "unmatched", 405, 0.001)
    metrics.answered("GET", "/healthz", 200, 0.001)
    requests = series(metrics, "tether_http_requests_total")
    assert len(requests) == 2, requests
    assert len(series(metrics, "tether_http_request_seconds_count")) == 2


async def test_unknown_paths_share_one_series(tmp_path: Path) -> None:
    async with served(tmp_path) as server, aiohttp.ClientSession() as session:
        for i in range(20):
            async with session.get(f"{server.base}/nowhere/{i}") as r:
                assert r.status == 404
        async with session.get(f"{server.base}/metrics") as r:
            text = await r.text()
    lines = [line for line in text.splitlines() if line.startswith("tether_http_requests_total")]
    assert [line for line in lines if "nowhere" in line] == []
    assert 'tether_http_requests_total{method="GET",route="unmatched",status="404"} 20.0' in lines


async def test_series_read_from_a_database_that_is_down_are_not_given_as_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/metrics`` still answers (its requests' counts matter most then) with NaN for the one
    series read from the store; ``/api/admin/metrics``, read from the store, answers 503."""

    @contextlib.asynccontextmanager
    async def down(*_: object) -> AsyncIterator[Any]:
        raise StoreUnavailable("OperationalError: connection refused")
        yield

    async with served(tmp_path) as server, aiohttp.ClientSession() as session:
        async with session.get(f"{server.base}/metrics") as r:
            assert r.status == 200
            assert "\ntether_queued_invocations 0.0\n" in await r.text()
        async with session.get(f"{server.base}/api/admin/metrics") as r:
            assert r.status == 200  # tether dev's one user is admin

        for use in ("connection", "snapshot", "transaction"):  # every read, as a store does
            monkeypatch.setattr(Database, use, down)  # whose database is down
        await asyncio.sleep(MAX_AGE)  # past what the caches may give without reading again
        async with session.get(f"{server.base}/metrics") as r:
            assert r.status == 200
            assert "\ntether_queued_invocations NaN\n" in await r.text()
        async with session.get(f"{server.base}/api/admin/metrics") as r:
            assert r.status == 503 and r.headers["Retry-After"] == "1"
            assert (await r.json())["error"]["code"] == "overloaded"

        monkeypatch.undo()
        async with session.get(f"{server.base}/metrics") as r:
            assert "\ntether_queued_invocations 0.0\n" in await r.text()
        async with session.get(f"{server.base}/api/admin/metrics") as r:
            assert r.status == 200
