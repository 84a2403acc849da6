"""The composition root: the one place that puts a gateway and a worker together.

``tether gateway`` is the gateway alone on the distributed services; ``tether dev`` is the same
gateway with a worker node running beside it on the embedded services. The gateway itself never
knows which: it is handed a way to open its services.
"""

from __future__ import annotations

from aiohttp import web

from tether.app import AgentApp
from tether.gateway.app import create_app
from tether.loops import settle_heap
from tether.settings import Settings
from tether.worker.wiring import distributed_services, embedded_node


def gateway_app(settings: Settings, app: AgentApp) -> web.Application:
    """The HTTP gateway on PostgreSQL, Redis pub/sub and Dramatiq (workers run elsewhere)."""
    return _settled(create_app(settings, app, lambda: distributed_services(settings)))


def dev_app(settings: Settings, app: AgentApp) -> web.Application:
    """The HTTP gateway with a worker node in the same process, on the embedded store."""
    return _settled(create_app(settings, app, lambda: embedded_node(settings, app)))


def _settled(web_app: web.Application) -> web.Application:
    """Settle the heap once the app's services are open (:func:`tether.loops.settle_heap`)."""

    async def settle(_: web.Application) -> None:
        settle_heap()

    web_app.on_startup.append(settle)
    return web_app
