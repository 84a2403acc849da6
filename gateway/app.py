"""``create_app``: the aiohttp application of one gateway process."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from tether.app import AgentApp
from tether.errors import ErrorCode
from tether.gateway.accept import Acceptor, QueuedGauge
from tether.gateway.admin import routes as admin_routes
from tether.gateway.agent_routes import routes as agent_routes
from tether.gateway.auth import resolve_auth
from tether.gateway.body import read_body
from tether.gateway.edge_headers import edge_headers
from tether.gateway.inputs import routes as input_routes
from tether.gateway.invocation_reads import InvocationReads
from tether.gateway.keys import (
    ACCEPTOR,
    AGENT_APP,
    AUTH,
    INVOCATION_READS,
    METRICS,
    QUEUED,
    SERVICES,
    SETTINGS,
    STREAM_READS,
    STREAMS,
    TENANCY,
    TENANT_COUNTS,
)
from tether.gateway.loopback_hosts import is_loopback, loopback_hosts_only
from tether.gateway.metrics import GatewayMetrics
from tether.gateway.openapi import openapi_text
from tether.gateway.parsing import json_only
from tether.gateway.responses import ApiError, error_response
from tether.gateway.routes import routes
from tether.gateway.sse import EventStreamResponse
from tether.gateway.stream_reads import StreamReads
from tether.gateway.tenancy import resolve_tenancy
from tether.gateway.tenant_limits import OpenCountsCache
from tether.gateway.unparsed import install as install_unparsed_answers
from tether.gateway.usage_metrics import TENANT_USAGE, TenantUsageMetrics
from tether.pubsub import OpenStreams
from tether.services import Services
from tether.settings import Settings
from tether.store.errors import SchemaMissing, ValueRefused
from tether.store.store import StoreError, StoreUnavailable

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


HTTP_ERROR_CODES: dict[int, ErrorCode] = {
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
}
"""aiohttp's own refusals (no route, wrong method, too large), in the one error shape."""
KEPT_HEADERS = ("Allow",)


def http_error(exc: web.HTTPException) -> web.Response:
    if exc.status >= 500:
        return internal_error()
    headers = {name: exc.headers[name] for name in KEPT_HEADERS if name in exc.headers}
    code = HTTP_ERROR_CODES.get(exc.status, ErrorCode.INVALID_REQUEST)
    return error_response(code, http_status=exc.status, message=exc.reason, headers=headers)


def internal_error() -> web.Response:
    return error_response(ErrorCode.INVOCATION_FAILED, http_status=500, message="internal error")


@web.middleware
async def errors_and_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
    metrics = request.app[METRICS]
    route = (
        request.match_info.route.resource.canonical
        if request.match_info.route.resource
        else "unmatched"
    )
    started = time.perf_counter()
    try:
        response = await handler(request)
    except ApiError as exc:
        response = exc.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = http_error(exc)
    except ValueRefused as exc:  # the request's own value: repeating it cannot help
        # WARNING: mostly a value past what a check knew, but a server bug may look the same
        log.warning("the database refused a value on %s %s (%s)", request.method, route, exc)
        response = error_response(ErrorCode.INVALID_REQUEST, message=exc.public_message)
    except (StoreUnavailable, SchemaMissing) as exc:  # retryable: the client may try shortly
        if isinstance(exc, SchemaMissing):
            log.error("database not migrated on %s %s: run `tether migrate`", request.method, route)
        else:
            log.warning("database unavailable on %s %s (%s)", request.method, route, exc)
        response = error_response(
            ErrorCode.OVERLOADED,
            message="the database is unavailable; retry later",
            headers={"Retry-After": str(request.app[SETTINGS].limits.retry_after)},
        )
    except (Exception, SystemExit):  # sys.exit in a custom route ends that request alone
        log.exception("unhandled error on %s %s", request.method, route)
        response = internal_error()
    streamed = response.started_at if isinstance(response, EventStreamResponse) else None
    answered = streamed or time.perf_counter()  # a stream: to its first byte
    metrics.answered(request.method, route, response.status, answered - started)
    return response


async def metrics_view(request: web.Request) -> web.Response:
    """This process's series, answered while the database is down too (its requests' counts
    matter most then): the one series read from the database is NaN until it reads again."""
    metrics = request.app[METRICS]
    try:
        metrics.queued.set(await request.app[QUEUED].value())
    except StoreError:
        metrics.queued.set(math.nan)
    return prometheus_text(metrics.registry)


async def tenant_metrics_view(request: web.Request) -> web.Response:
    """The per-tenant series: tenants' names are often owners', so admins only. They are read
    from the database: when it cannot answer, neither does this (503), and the scrape fails
    rather than give the last values as current."""
    request.app[TENANCY].require_admin(request)
    metrics = request.app[METRICS]
    await request.app[TENANT_USAGE].refresh()
    metrics.set_tenant_counts(await request.app[TENANT_COUNTS].value())
    return prometheus_text(metrics.tenant_registry)


def prometheus_text(registry: CollectorRegistry) -> web.Response:
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def openapi_view(request: web.Request) -> web.Response:
    return web.Response(text=openapi_text(), content_type="application/json")


async def close_streams(app: web.Application) -> None:
    """On shutdown, end every open stream with a final comment so clients reconnect elsewhere,
    and answer every waiting sync caller (202 and the URLs); one that begins after is told too."""
    app[STREAMS].close()


ServicesFactory = Callable[[], contextlib.AbstractAsyncContextManager[Services]]
"""Opens what the gateway talks to; the composition root decides which mode that is."""


def create_app(
    settings: Settings, agent_app: AgentApp, open_services: ServicesFactory
) -> web.Application:
    """The gateway of one process: HTTP only. It never runs handlers; in ``tether dev`` the
    composition root runs a worker node beside it and hands both the same services."""
    install_unparsed_answers()
    own = [
        r
        for table in (routes, input_routes, agent_routes, admin_routes)
        for r in table
        if isinstance(r, web.RouteDef)
    ]
    json_posts = {r.handler for r in own if r.method == "POST"}
    auth = resolve_auth(settings.auth)  # AuthConfigError here, before anything listens
    middlewares = [errors_and_metrics, json_only(json_posts), read_body({r.handler for r in own})]
    if auth.mode == "none" and is_loopback(settings.host):  # one user: this machine's only
        middlewares.insert(1, loopback_hosts_only(settings.host))
    app = web.Application(client_max_size=settings.limits.max_body_bytes, middlewares=middlewares)
    app[SETTINGS] = settings
    app[AUTH] = auth
    app[TENANCY] = resolve_tenancy(settings.auth, app[AUTH])
    app[AGENT_APP] = agent_app
    app[METRICS] = GatewayMetrics()
    app[STREAMS] = OpenStreams()

    async def services_ctx(app: web.Application) -> AsyncIterator[None]:
        async with open_services() as services:
            app[SERVICES] = services
            max_open = settings.limits.max_active_per_owner
            app[ACCEPTOR] = Acceptor(
                services.store,
                services.queue,
                max_open,
                services.credentials,
                pubsub=services.pubsub,
            )
            app[QUEUED] = QueuedGauge(services.store)
            app[TENANT_USAGE] = TenantUsageMetrics(
                services.store.usage, app[METRICS].tenant_registry
            )
            app[TENANT_COUNTS] = OpenCountsCache(services.store.tenants)
            app[INVOCATION_READS] = InvocationReads(services.store)
            app[STREAM_READS] = StreamReads(services.store, settings.limits.replay_cache_bytes)
            yield

    app.cleanup_ctx.append(services_ctx)
    app.on_shutdown.append(close_streams)
    app.on_response_prepare.append(edge_headers)
    app.add_routes(routes)
    app.add_routes(input_routes)
    app.add_routes(agent_routes)
    app.add_routes(admin_routes)
    app.router.add_get("/metrics", metrics_view)
    app.router.add_get("/api/admin/metrics", tenant_metrics_view)
    app.router.add_get("/openapi.json", openapi_view)
    for route in agent_app.routes:
        app.router.add_route(route.method, route.path, route.handler)
    return app
