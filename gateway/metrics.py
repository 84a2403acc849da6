"""Prometheus metrics of one gateway process, in two registries of its own: ``registry`` on the
unauthenticated ``/metrics`` (counts and latencies, never an owner's or a tenant's name), and
``tenant_registry``, every series labelled by tenant (a tenant is its owner unless one is
named), on ``/api/admin/metrics`` for admins alone."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tether.store.tenants import OpenCounts

TENANT_GAUGES = ("queued", "running", "waiting")
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""The methods counted by name; any other is ``other``: aiohttp's pure-Python parser takes any
token as a method, and a series per name would let any client add series without end."""


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.tenant_registry = CollectorRegistry()
        self.requests = Counter(
            "tether_http_requests",
            "HTTP requests answered, by route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tether_http_request_seconds",
            "Time to answer (to the first byte for streams).",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.accepted = Counter(
            "tether_invocations_accepted",
            "POST /api/invocations accepted, by mode and whether the id was new.",
            ["mode", "new"],
            registry=self.registry,
        )
        self.open_streams = Gauge(
            "tether_open_streams", "SSE streams open now.", registry=self.registry
        )
        self.slow_readers_closed = Counter(
            "tether_stream_slow_readers_closed",
            "SSE streams closed because the reader fell too far behind.",
            registry=self.registry,
        )
        self.queued = Gauge(
            "tether_queued_invocations",
            "Queued invocations (as last read for admission control).",
            registry=self.registry,
        )
        # Per tenant. Throttled counts this process's refusals; the gauges are the whole
        # deployment's (one grouped count, read on scrape at most once a second), so any one
        # gateway's scrape is enough. Tokens used per tenant are tether.gateway.usage_metrics'.
        self.throttled = Counter(
            "tether_tenant_throttled",
            "Accepts refused for a tenant, by reason: rate (its token bucket was empty) or "
            "max_queued (it had that many open invocations).",
            ["tenant", "reason"],
            registry=self.tenant_registry,
        )
        self.tenant_open = {
            name: Gauge(
                f"tether_tenant_{name}",
                f"The tenant's {name} invocations (tenants with none open are left out).",
                ["tenant"],
                registry=self.tenant_registry,
            )
            for name in TENANT_GAUGES
        }
        self._answered: dict[tuple[str, str, int], tuple[Histogram, Counter]] = {}
        self._accepted: dict[tuple[str, bool], Counter] = {}

    def answered(self, method: str, route: str, status: int, seconds: float) -> None:
        """One request answered: its latency and its count, through each label set's child
        (``labels()`` checks and converts its values on every call; this is once per set)."""
        if method not in METHODS:
            method = "other"
        key = (method, route, status)
        children = self._answered.get(key)
        if children is None:
            children = self._answered[key] = (
                self.latency.labels(method, route),
                self.requests.labels(method, route, str(status)),
            )
        latency, requests = children
        latency.observe(seconds)
        requests.inc()

    def count_accepted(self, mode: str, created: bool) -> None:
        key = (mode, created)
        child = self._accepted.get(key)
        if child is None:
            child = self._accepted[key] = self.accepted.labels(mode=mode, new=str(created).lower())
        child.inc()

    def set_tenant_counts(self, counts: Mapping[str, OpenCounts]) -> None:
        """Every tenant gauge from one grouped count; a tenant with nothing open drops out."""
        for name, gauge in self.tenant_open.items():
            gauge.clear()
            for tenant, count in counts.items():
                gauge.labels(tenant=tenant).set(getattr(count, name))
