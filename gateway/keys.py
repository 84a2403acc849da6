"""Typed application state keys: the gateway keeps nothing in module globals."""

from __future__ import annotations

from aiohttp import web

from tether.app import AgentApp
from tether.gateway.accept import Acceptor, QueuedGauge
from tether.gateway.auth import Authenticator
from tether.gateway.invocation_reads import InvocationReads
from tether.gateway.metrics import GatewayMetrics
from tether.gateway.stream_reads import StreamReads
from tether.gateway.tenancy import Tenancy
from tether.gateway.tenant_limits import OpenCountsCache
from tether.pubsub import OpenStreams
from tether.services import Services
from tether.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
SERVICES = web.AppKey("services", Services)
AUTH = web.AppKey("auth", Authenticator)
AGENT_APP = web.AppKey("agent_app", AgentApp)
METRICS = web.AppKey("metrics", GatewayMetrics)
ACCEPTOR = web.AppKey("acceptor", Acceptor)
QUEUED = web.AppKey("queued", QueuedGauge)
TENANCY = web.AppKey("tenancy", Tenancy)
TENANT_COUNTS = web.AppKey("tenant_counts", OpenCountsCache)
STREAMS: web.AppKey[OpenStreams] = web.AppKey("streams")
STREAM_READS = web.AppKey("stream_reads", StreamReads)
INVOCATION_READS = web.AppKey("invocation_reads", InvocationReads)
