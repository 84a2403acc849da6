"""``/metrics``: a bounded set of series whatever unauthenticated clients send."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from prometheus_client import generate_latest

from tests.inprocess import served
from tether.gateway.metrics import GatewayMetrics


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
