"""The HTTP API: AgentKit's ``/api/invocations`` contract plus Tether's extensions."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from gateway.auth import resolve_owner
from gateway.keys import METRICS, SERVICES, SETTINGS, STREAMS
from gateway.models import InvocationRequest, canonical_uuid, urls, view
from gateway.responses import ApiError, error_response, json_response
from gateway.sse import SSE_HEADERS, EventStream
from shared.channels import CANCEL_CHANNEL, events_channel
from shared.errors import ErrorCode
from shared.events import decode_batch
from shared.jsonvalue import InvalidJson, loads, request_hash
from shared.pubsub import publish_events
from shared.store.schema import Invocation, NewInvocation, Status
from shared.store.store import Conflict, OwnerLimitReached

log = logging.getLogger(__name__)
routes = web.RouteTableDef()
WAIT_RECHECK = 5.0
MAX_PAGE = 200


async def read_json(request: web.Request) -> Any:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(ErrorCode.PAYLOAD_TOO_LARGE) from None
    try:
        return loads(raw)
    except InvalidJson as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, status=400, message=str(exc)) from None


def validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


async def owned_invocation(request: web.Request) -> Invocation:
    """The invocation named in the path, if the caller owns it; 404 otherwise."""
    invocation_id = request.match_info["id"]
    try:
        invocation_id = canonical_uuid(invocation_id)
    except ValueError:
        raise ApiError(ErrorCode.NOT_FOUND) from None
    invocation = await request.app[SERVICES].store.get(invocation_id)
    owner = resolve_owner(request, request.app[SETTINGS].auth)
    if invocation is None or invocation.owner != owner:
        raise ApiError(ErrorCode.NOT_FOUND)
    return invocation


@routes.post("/api/invocations")
async def create_invocation(request: web.Request) -> web.StreamResponse:
    settings, services = request.app[SETTINGS], request.app[SERVICES]
    owner = resolve_owner(request, settings.auth)
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError(ErrorCode.INVALID_REQUEST, message="body must be a JSON object")
    try:
        req = InvocationRequest.model_validate(body)
    except ValidationError as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, message=validation_message(exc)) from None
    await admit(request, req.id)
    new = NewInvocation(req.id, owner, req.session_id, req.input, request_hash(req.input, req.session_id))
    try:
        accepted = await services.acceptor.accept(new)  # enqueued too, when created
    except Conflict:
        raise ApiError(ErrorCode.CONFLICT) from None
    except OwnerLimitReached:
        raise ApiError(ErrorCode.RATE_LIMITED, headers=retry_after(request)) from None
    mode = "background" if req.background else "stream" if req.stream else "sync"
    request.app[METRICS].accepted.labels(mode=mode, new=str(accepted.created).lower()).inc()
    invocation = accepted.invocation
    if req.background:
        return json_response({"id": invocation.id, "status": invocation.status.value, **urls(invocation.id)}, 202)
    if req.stream:
        return await stream(request, invocation.id, last_event_id(request))
    return await answer_sync(request, invocation)


def retry_after(request: web.Request) -> dict[str, str]:
    return {"Retry-After": str(request.app[SETTINGS].limits.retry_after)}


async def admit(request: web.Request, invocation_id: str) -> None:
    """503 when the queue is over its admission limit (a repeat of an accepted id still passes)."""
    limit = request.app[SETTINGS].limits.max_queued
    services = request.app[SERVICES]
    if limit and await services.queued.value() >= limit:
        if await services.store.get(invocation_id) is None:
            raise ApiError(ErrorCode.OVERLOADED, headers=retry_after(request))


async def enqueue_quietly(request: web.Request, invocation_id: str) -> None:
    try:
        await request.app[SERVICES].enqueue(invocation_id, 0.0)
    except Exception as exc:  # accepted all the same: the reaper re-enqueues it
        log.warning("invocation %s: enqueue failed (%s); the reaper will retry", invocation_id, type(exc).__name__)


async def answer_sync(request: web.Request, invocation: Invocation) -> web.Response:
    timeout = request.app[SETTINGS].timers.sync_timeout
    invocation = await wait_until_terminal(request, invocation.id, timeout)
    if invocation.status is Status.COMPLETED:
        return json_response({"id": invocation.id, "status": "completed", "output": invocation.output})
    if invocation.status.is_terminal:
        code = ErrorCode(invocation.error_code or ErrorCode.INVOCATION_FAILED.value)
        return error_response(
            code,
            http_status=409 if invocation.status is Status.CANCELLED else 500,
            message=invocation.error_message,
            id=invocation.id,
            status=invocation.status.value,
        )
    return json_response({"id": invocation.id, "status": invocation.status.value, **urls(invocation.id)}, 202)


async def wait_until_terminal(request: web.Request, invocation_id: str, timeout: float) -> Invocation:
    """Woken by the terminal event on pub/sub; re-reads the store on a resync or a quiet spell."""
    services = request.app[SERVICES]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with services.pubsub.subscribe(events_channel(invocation_id)) as sub:
        invocation = await services.store.get(invocation_id)
        while invocation is not None and not invocation.status.is_terminal:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            message = await sub.get(timeout=min(remaining, WAIT_RECHECK))
            if isinstance(message, str) and not any(e.is_terminal for e in decode_batch(message)):
                continue
            invocation = await services.store.get(invocation_id)
    if invocation is None:
        raise ApiError(ErrorCode.NOT_FOUND)
    return invocation


def last_event_id(request: web.Request) -> int:
    """``after`` from the query, else the ``Last-Event-ID`` header, else 0."""
    raw = request.query.get("after")
    if raw is None:
        raw = request.headers.get("Last-Event-ID", "0").strip() or "0"
    if not raw.isdigit() or len(raw) > 18:
        raise ApiError(ErrorCode.INVALID_REQUEST, message="after / Last-Event-ID must be a non-negative integer")
    return int(raw)


async def stream(request: web.Request, invocation_id: str, after: int) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers=SSE_HEADERS)
    await response.prepare(request)
    services, metrics = request.app[SERVICES], request.app[METRICS]
    events = EventStream(
        services.store,
        services.pubsub,
        invocation_id,
        response,
        ping_interval=request.app[SETTINGS].timers.ping_interval,
        last_sent=after,
    )
    metrics.open_streams.inc()
    try:
        await events.run(request.app[STREAMS])
    except (ConnectionResetError, asyncio.CancelledError):
        pass  # the client went away
    finally:
        metrics.open_streams.dec()
    return response


@routes.get("/api/invocations/{id}")
async def get_invocation(request: web.Request) -> web.Response:
    return json_response(view(await owned_invocation(request)))


@routes.get("/api/invocations/{id}/events")
async def get_events(request: web.Request) -> web.StreamResponse:
    after = last_event_id(request)
    invocation = await owned_invocation(request)
    return await stream(request, invocation.id, after)


@routes.post("/api/invocations/{id}/cancel")
async def cancel_invocation(request: web.Request) -> web.Response:
    invocation = await owned_invocation(request)
    if invocation.status.is_terminal:
        return json_response(view(invocation))
    services = request.app[SERVICES]
    finished = await services.store.request_cancel(invocation.id)
    if finished is not None:  # it was queued: cancelled here and now
        await publish_events(services.pubsub, invocation.id, finished.events)
        if finished.successor_id is not None:
            await enqueue_quietly(request, finished.successor_id)
    else:
        try:
            await services.pubsub.publish(CANCEL_CHANNEL, [invocation.id])
        except Exception as exc:  # the worker's heartbeat notices the flag instead
            log.warning("invocation %s: cancel publish failed (%s)", invocation.id, type(exc).__name__)
    current = await services.store.get(invocation.id)
    return json_response(view(current or invocation))


@routes.get("/api/invocations")
async def list_invocations(request: web.Request) -> web.Response:
    owner = resolve_owner(request, request.app[SETTINGS].auth)
    query = request.query
    try:
        status = Status(query["status"]) if "status" in query else None
        limit = int(query.get("limit", "50"))
        before = int(query["cursor"]) if "cursor" in query else None
    except ValueError:
        raise ApiError(
            ErrorCode.INVALID_REQUEST,
            message="status must be a known status; limit and cursor must be integers",
        ) from None
    if not 1 <= limit <= MAX_PAGE:
        raise ApiError(ErrorCode.INVALID_REQUEST, message=f"limit must be between 1 and {MAX_PAGE}")
    page = await request.app[SERVICES].store.list_owned(
        owner, status=status, session_id=query.get("session_id"), before_seq=before, limit=limit
    )
    next_cursor = str(page[-1].seq) if len(page) == limit else None
    return json_response({"data": [view(i) for i in page], "next_cursor": next_cursor})


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    checks: dict[str, str] = {}
    for name, probe in (("database", services.store.ping), ("pubsub", services.pubsub.ping)):
        try:
            await asyncio.wait_for(probe(), timeout=2.0)
            checks[name] = "ok"
        except Exception as exc:
            checks[name] = f"unavailable ({type(exc).__name__})"
    ready = all(v == "ok" for v in checks.values())
    return json_response({"status": "ready" if ready else "unavailable", "checks": checks}, 200 if ready else 503)
