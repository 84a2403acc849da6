"""Per-tenant model usage on ``/api/admin/metrics``, read from the store when scraped (at
most once a second): tokens and cost over every stored budget period (counters), and tokens in
the current period (a gauge). The worker has no metrics endpoint; the store is where every
worker's usage meets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tether.store.usage import TenantUsage, Usage


class TenantUsageMetrics(Collector):
    """A collector of the last read of ``tether_tenant_usage``; :meth:`refresh` reads it again
    when it is older than ``max_age`` seconds."""

    def __init__(self, usage: Usage, registry: CollectorRegistry, max_age: float = 1.0) -> None:
        self._usage = usage
        self._max_age = max_age
        self._rows: list[TenantUsage] = []
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()
        registry.register(self)

    async def refresh(self) -> None:
        if time.monotonic() - self._read_at <= self._max_age:
            return
        async with self._lock:
            if time.monotonic() - self._read_at > self._max_age:
                self._rows = await self._usage.tenants()
                self._read_at = time.monotonic()

    def collect(self) -> Iterator[Metric]:
        tokens = CounterMetricFamily(
            "tether_tenant_tokens",
            "Model tokens used by each tenant's agent runs (estimated where none were reported).",
            labels=["tenant"],
        )
        cost = CounterMetricFamily(
            "tether_tenant_cost",
            "Model cost of each tenant's agent runs (0 for models without a price).",
            labels=["tenant"],
        )
        period = GaugeMetricFamily(
            "tether_tenant_period_tokens",
            "Model tokens each tenant has used in its current budget period.",
            labels=["tenant"],
        )
        for row in self._rows:
            tokens.add_metric([row.tenant], row.tokens)
            cost.add_metric([row.tenant], row.cost)
            period.add_metric([row.tenant], row.period_tokens)
        yield from (tokens, cost, period)


TENANT_USAGE = web.AppKey("tenant_usage", TenantUsageMetrics)
