"""The HTTP API: AgentKit's ``/api/invocations`` contract plus Tether's extensions."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from tether.channels import CANCEL_CHANNEL, events_channel
from tether.errors import ErrorCode
from tether.events import RUN_WAITING, Event, decode_batch
from tether.gateway.keys import ACCEPTOR, AUTH, METRICS, QUEUED, SERVICES, SETTINGS
from tether.gateway.models import InvocationRequest, canonical_uuid, urls, view
from tether.gateway.responses import ApiError, error_response, json_response
from tether.gateway.sse import serve_stream
from tether.jsonvalue import InvalidJson, loads, request_hash
from tether.outcomes import outcome_of
from tether.pubsub import Subscription
from tether.store.schema import Invocation, NewInvocation, Status
from tether.store.store import Accepted, Conflict, OwnerLimitReached, ValueRefused

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
    owner = request.app[AUTH].owner(request)  # first: an unknown caller learns nothing
    invocation_id = request.match_info["id"]
    try:
        invocation_id = canonical_uuid(invocation_id)
    except ValueError:
        raise ApiError(ErrorCode.NOT_FOUND) from None
    invocation = await request.app[SERVICES].store.get(invocation_id)
    if invocation is None or invocation.owner != owner:
        raise ApiError(ErrorCode.NOT_FOUND)
    return invocation


@routes.post("/api/invocations")
async def create_invocation(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    owner = request.app[AUTH].owner(request)
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError(ErrorCode.INVALID_REQUEST, message="body must be a JSON object")
    try:
        req = InvocationRequest.model_validate(body)
    except ValidationError as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, message=validation_message(exc)) from None
    await admit(request, req.id)
    new = NewInvocation(
        req.id, owner, req.session_id, req.input, request_hash(req.input, req.session_id)
    )
    mode = "background" if req.background else "stream" if req.stream else "sync"
    if mode == "sync":
        # Subscribed before the accept, so the run cannot end unseen in between and the wait
        # needs no first read of the store.
        async with services.pubsub.subscribe(events_channel(req.id)) as sub:
            accepted = await accept(request, new, mode)
            return await answer_sync(request, accepted.invocation, sub)
    invocation = (await accept(request, new, mode)).invocation
    if req.background:
        body = {"id": invocation.id, "status": invocation.status.value, **urls(invocation.id)}
        return json_response(body, 202)
    return await stream(request, invocation.id, last_event_id(request))


async def accept(request: web.Request, new: NewInvocation, mode: str) -> Accepted:
    """Store the invocation (or find the same request's) and enqueue it when new."""
    try:
        accepted = await request.app[ACCEPTOR].accept(new)
    except Conflict:
        raise ApiError(ErrorCode.CONFLICT) from None
    except OwnerLimitReached:
        raise ApiError(ErrorCode.RATE_LIMITED, headers=retry_after(request)) from None
    except ValueRefused as exc:  # this request alone: the others of its batch were accepted
        raise ApiError(ErrorCode.INVALID_REQUEST, message=exc.public_message) from None
    request.app[METRICS].accepted.labels(mode=mode, new=str(accepted.created).lower()).inc()
    return accepted


def retry_after(request: web.Request) -> dict[str, str]:
    return {"Retry-After": str(request.app[SETTINGS].limits.retry_after)}


async def admit(request: web.Request, invocation_id: str) -> None:
    """503 when the queue is over its admission limit (a repeat of an accepted id still passes)."""
    limit = request.app[SETTINGS].limits.max_queued
    services = request.app[SERVICES]
    over = bool(limit) and await request.app[QUEUED].value() >= limit
    if over and await services.store.get(invocation_id) is None:
        raise ApiError(ErrorCode.OVERLOADED, headers=retry_after(request))


async def answer_sync(
    request: web.Request, invocation: Invocation, sub: Subscription
) -> web.Response:
    limit = request.app[SETTINGS].timers.sync_timeout
    invocation = await wait_until_terminal(request, invocation, sub, limit)
    if invocation.status is Status.COMPLETED:
        return json_response(
            {"id": invocation.id, "status": "completed", "output": invocation.output}
        )
    if invocation.status.is_terminal:
        code = ErrorCode(invocation.error_code or ErrorCode.INVOCATION_FAILED.value)
        return error_response(
            code,
            http_status=409 if invocation.status is Status.CANCELLED else 500,
            message=invocation.error_message,
            id=invocation.id,
            status=invocation.status.value,
        )
    if invocation.status is Status.WAITING:  # parked: the caller can act on what it waits for
        return json_response(
            {**await status_document(request, invocation), **urls(invocation.id)}, 202
        )
    return json_response(
        {"id": invocation.id, "status": invocation.status.value, **urls(invocation.id)}, 202
    )


async def status_document(request: web.Request, invocation: Invocation) -> dict[str, Any]:
    """``view`` of one invocation, with its waits when it is parked."""
    return (await status_documents(request, [invocation]))[0]


async def status_documents(request: web.Request, page: list[Invocation]) -> list[dict[str, Any]]:
    parked = [i.id for i in page if i.status is Status.WAITING]
    waits = await request.app[SERVICES].store.journal.waiting_for(parked) if parked else {}
    return [view(i, [w.entry() for w in waits.get(i.id, [])]) for i in page]


async def wait_until_terminal(
    request: web.Request, invocation: Invocation, sub: Subscription, limit: float
) -> Invocation:
    """Woken by the terminal event on ``sub`` (subscribed before ``invocation`` was read); the
    outcome comes from that event when it carries it all, else from the store, which is also
    re-read on a resync or a quiet spell. A run that parks (``run.waiting``) ends the wait too."""
    store = request.app[SERVICES].store
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    current: Invocation | None = invocation
    while current is not None and not current.status.is_terminal:
        if current.status is Status.WAITING:
            break
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        message = await sub.get(timeout=min(remaining, WAIT_RECHECK))
        if isinstance(message, str):
            batch = decode_batch(message)
            terminal = [e for e in batch if e.is_terminal]
            if not terminal:
                if any(e.type == RUN_WAITING for e in batch):
                    current = await store.get(invocation.id)
                continue
            ended = ended_by(current, terminal[-1])
            if ended is not None:
                current = ended
                continue
        current = await store.get(invocation.id)
    if current is None:
        raise ApiError(ErrorCode.NOT_FOUND)
    return current


def ended_by(invocation: Invocation, event: Event) -> Invocation | None:
    """The invocation as its terminal event leaves it (the event carries the whole outcome), or
    None for an event that ends nothing."""
    outcome = outcome_of(event)
    if outcome is None:
        return None
    return replace(
        invocation,
        status=outcome.status,
        output=outcome.output,
        error_code=outcome.code,
        error_message=outcome.error_message,
    )


def last_event_id(request: web.Request) -> int:
    """``after`` from the query, else the ``Last-Event-ID`` header, else 0."""
    raw = request.query.get("after")
    if raw is None:
        raw = request.headers.get("Last-Event-ID", "0").strip() or "0"
    if not raw.isdigit() or len(raw) > 18:
        raise ApiError(
            ErrorCode.INVALID_REQUEST,
            message="after / Last-Event-ID must be a non-negative integer",
        )
    return int(raw)


async def stream(request: web.Request, invocation_id: str, after: int) -> web.StreamResponse:
    return await serve_stream(request, invocation_id, after)


@routes.get("/api/invocations/{id}")
async def get_invocation(request: web.Request) -> web.Response:
    return json_response(await status_document(request, await owned_invocation(request)))


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
        await services.after_terminal(invocation.id, finished)
    else:
        try:
            await services.pubsub.publish(CANCEL_CHANNEL, [invocation.id])
        except Exception as exc:  # the worker's heartbeat notices the flag instead
            log.warning(
                "invocation %s: cancel publish failed (%s)", invocation.id, type(exc).__name__
            )
    current = await services.store.get(invocation.id)
    return json_response(await status_document(request, current or invocation))


@routes.get("/api/invocations")
async def list_invocations(request: web.Request) -> web.Response:
    owner = request.app[AUTH].owner(request)
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
    data = await status_documents(request, page)
    return json_response({"data": data, "next_cursor": next_cursor})


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
    return json_response(
        {"status": "ready" if ready else "unavailable", "checks": checks}, 200 if ready else 503
    )
