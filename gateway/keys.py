"""Typed application state keys: the gateway keeps nothing in module globals."""

from __future__ import annotations

from aiohttp import web

from gateway.metrics import GatewayMetrics
from gateway.services import Services
from shared.app import AgentApp
from shared.pubsub import Subscription
from shared.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
SERVICES = web.AppKey("services", Services)
AGENT_APP = web.AppKey("agent_app", AgentApp)
METRICS = web.AppKey("metrics", GatewayMetrics)
STREAMS: web.AppKey[set[Subscription]] = web.AppKey("streams")
