"""The HTTP API: AgentKit's ``/api/invocations`` contract plus Tether's extensions."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from aiohttp import web

from tether.channels import CANCEL_CHANNEL, events_channel
from tether.credentials import UserCredential
from tether.errors import ErrorCode
from tether.events import RUN_WAITING, Event, decode_batch
from tether.gateway.accept import TenantRateLimited
from tether.gateway.checks import caller_credential, checked_input
from tether.gateway.hangups import hangup_closes
from tether.gateway.keys import (
    ACCEPTOR,
    AGENT_APP,
    AUTH,
    INVOCATION_READS,
    METRICS,
    QUEUED,
    SERVICES,
    SETTINGS,
    STREAMS,
    TENANCY,
)
from tether.gateway.models import (
    AcceptedResponse,
    CompletedResponse,
    HealthResponse,
    InvocationErrorResponse,
    InvocationPage,
    InvocationRequest,
    InvocationView,
    ListQuery,
    ParkedResponse,
    ReadyResponse,
    WaitingView,
    canonical_uuid,
    error_of,
    view,
)
from tether.gateway.parsing import cursor, query_of, read_json, validated
from tether.gateway.responses import ApiError, json_response
from tether.gateway.sse import serve_stream
from tether.jsonvalue import InvalidJson, canonical, request_hash
from tether.outcomes import outcome_of
from tether.pubsub import CLOSING, Subscription
from tether.store.errors import SchemaMissing, StoreError
from tether.store.schema import Invocation, NewInvocation, Status
from tether.store.store import (
    Accepted,
    Conflict,
    OwnerLimitReached,
    TenantLimitReached,
)

log = logging.getLogger(__name__)
routes = web.RouteTableDef()
READY_WITHIN = 2.0
"""Seconds each ``/readyz`` check may take."""
WAIT_RECHECK = 5.0


PATH_ID = "{id:[^/]+}"
"""An id in a path: any UUID spelling the POST's ``id`` takes (or a thread id), braces included
(aiohttp's default pattern for a path parameter matches no brace: ``{…}`` would be a 404)."""
INVOCATION = "/api/invocations/" + PATH_ID


def caller_and_id(request: web.Request) -> tuple[str, str]:
    """The caller, then the invocation id in the path (an id that is no UUID is a 404)."""
    owner = request.app[AUTH].owner(request)  # first: an unknown caller learns nothing
    try:
        return owner, canonical_uuid(request.match_info["id"])
    except ValueError:
        raise ApiError(ErrorCode.NOT_FOUND) from None


def canonical_input(value: Any, field: str = "input") -> str:
    """A value's canonical JSON text (an input's request hash covers it, its row stores it); a
    422 naming ``field`` for a value JSON cannot hold, as the store would answer (a float
    literal too large, ``1e999``, parses as infinity: ``read_json`` lets it through)."""
    try:
        return canonical(value)
    except InvalidJson as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, message=f"{field}: {exc}") from None


async def owned_invocation(request: web.Request) -> Invocation:
    """The invocation named in the path, if the caller owns it; 404 otherwise."""
    owner, invocation_id = caller_and_id(request)
    invocation = await request.app[INVOCATION_READS].get(invocation_id)
    if invocation is None or invocation.owner != owner:
        raise ApiError(ErrorCode.NOT_FOUND)
    return invocation


@routes.post("/api/invocations")
async def create_invocation(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    owner = request.app[AUTH].owner(request)
    after = last_event_id(request)  # a stream's cursor is refused before anything is accepted
    req = validated(InvocationRequest, await read_json(request))
    input_text = canonical_input(req.input)  # for the request hash, and then stored as it is
    tenant = request.app[TENANCY].tenant(request, owner)
    credential = caller_credential(request, owner, checked_input(request, req.input))
    await admit(request, req.id, owner)
    new = NewInvocation(
        req.id,
        owner,
        req.session_id,
        req.input,
        request_hash(input_text, req.session_id, req.priority),
        user_auth=credential is not None,
        tenant=tenant,
        priority=req.priority,
        input_text=input_text,
    )
    mode = "background" if req.background else "stream" if req.stream else "sync"
    if mode == "sync":
        # Subscribed before the accept, so the run cannot end unseen in between and the wait
        # needs no first read of the store.
        async with services.pubsub.subscribe(events_channel(req.id)) as sub:
            accepted = await accept(request, new, mode, credential)
            return await answer_sync(request, accepted.invocation, sub)
    invocation = (await accept(request, new, mode, credential)).invocation
    if req.background:
        return json_response(AcceptedResponse.of(invocation), 202)
    return await serve_stream(request, invocation.id, after, seq=invocation.seq)


async def accept(
    request: web.Request, new: NewInvocation, mode: str, credential: UserCredential | None = None
) -> Accepted:
    """Store the invocation (or find the same request's) and enqueue it when new.

    An id already used for another request is a 409, and so is another owner's id, with the
    same body: ids are global, so only accepting could hide that one is taken, and the answer
    says nothing more (not whose it is, nor its status, input or output). A value the
    database refuses (this request alone: the others of its batch were accepted) is the error
    middleware's 422, as on every route.
    """
    throttled = request.app[METRICS].throttled
    try:
        accepted = await request.app[ACCEPTOR].accept(new, credential)
    except Conflict:
        raise ApiError(ErrorCode.CONFLICT) from None
    except OwnerLimitReached:
        raise ApiError(ErrorCode.RATE_LIMITED, headers=retry_after(request)) from None
    except TenantRateLimited as exc:
        throttled.labels(tenant=exc.tenant, reason="rate").inc()
        wait = {"Retry-After": str(exc.retry_after)}
        raise ApiError(ErrorCode.TENANT_RATE_LIMITED, headers=wait) from None
    except TenantLimitReached as exc:
        throttled.labels(tenant=exc.tenant, reason="max_queued").inc()
        raise ApiError(ErrorCode.TENANT_QUEUE_FULL, headers=retry_after(request)) from None
    request.app[METRICS].count_accepted(mode, accepted.created)
    return accepted


def retry_after(request: web.Request) -> dict[str, str]:
    return {"Retry-After": str(request.app[SETTINGS].limits.retry_after)}


async def admit(request: web.Request, invocation_id: str, owner: str) -> None:
    """503 when the queue is over its admission limit; a repeat of the caller's own accepted id
    still passes (another owner's id does not, so the answer does not depend on it)."""
    limit = request.app[SETTINGS].limits.max_queued
    if not limit or await request.app[QUEUED].value() < limit:
        return
    existing = await request.app[SERVICES].store.get(invocation_id)
    if existing is None or existing.owner != owner:
        raise ApiError(ErrorCode.OVERLOADED, headers=retry_after(request))


async def answer_sync(
    request: web.Request, invocation: Invocation, sub: Subscription
) -> web.Response:
    """200 with the output; 500 failed, 409 cancelled (one answer whoever cancelled it); 202
    with what it waits for when it parked; 202 with the URLs to follow when it is still running
    after ``sync_timeout``."""
    limit = request.app[SETTINGS].timers.sync_timeout
    invocation = await wait_until_terminal(request, invocation, sub, limit)
    if invocation.status is Status.COMPLETED:
        done = CompletedResponse(
            id=invocation.id, status=Status.COMPLETED, output=invocation.output
        )
        return json_response(done)
    if invocation.status is Status.FAILED or invocation.status is Status.CANCELLED:
        return answer_ended(invocation)
    if invocation.status is Status.WAITING:  # parked: the caller can act on what it waits for
        parked = (await status_document(request, invocation)).root
        assert isinstance(parked, WaitingView)
        return json_response(ParkedResponse.of(parked), 202)
    return json_response(AcceptedResponse.of(invocation), 202)


def answer_ended(invocation: Invocation) -> web.Response:
    """A sync caller's answer for a run that ended without output: 500 failed, 409 cancelled."""
    error = error_of(invocation)
    ended = InvocationErrorResponse(
        error=error, detail=error.message, id=invocation.id, status=invocation.status
    )
    return json_response(ended, 409 if invocation.status is Status.CANCELLED else 500)


async def status_document(request: web.Request, invocation: Invocation) -> InvocationView:
    """``view`` of one invocation, with its waits when it is parked."""
    return (await status_documents(request, [invocation]))[0]


async def status_documents(request: web.Request, page: list[Invocation]) -> list[InvocationView]:
    parked = [i.id for i in page if i.status is Status.WAITING]
    waits = await request.app[SERVICES].store.journal.waiting_for(parked) if parked else {}
    return [view(i, [w.entry() for w in waits.get(i.id, [])]) for i in page]


async def wait_until_terminal(
    request: web.Request, invocation: Invocation, sub: Subscription, limit: float
) -> Invocation:
    """Woken by the terminal event on ``sub`` (subscribed before ``invocation`` was read); the
    outcome comes from that event when it carries it all, else from the store, which is also
    re-read on a resync or a quiet spell. A run that parks (``run.waiting``) ends the wait too,
    and so does CLOSING: the process stopping (the caller gets 202 and the URLs, not a closed
    socket) or the caller hanging up (the connection is watched meanwhile)."""
    store = request.app[SERVICES].store
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    current: Invocation | None = invocation
    open_streams = request.app[STREAMS]  # told CLOSING when the process stops, as streams are
    open_streams.add(sub)
    try:
        with hangup_closes(request, sub):  # a caller that hangs up stops waiting
            while current is not None and not current.status.is_terminal:
                if current.status is Status.WAITING:
                    break
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                message = await sub.get(timeout=min(remaining, WAIT_RECHECK))
                if message is CLOSING:  # stopping: answer now, as things stand (202, the URLs)
                    current = await store.get(invocation.id)
                    break
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
    finally:
        open_streams.discard(sub)
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
    raw = query_of(request).get("after")
    if raw is not None:
        return cursor(raw, "after")
    return cursor(request.headers.get("Last-Event-ID", "").strip() or "0", "Last-Event-ID")


@routes.get(INVOCATION)
async def get_invocation(request: web.Request) -> web.Response:
    return json_response(await status_document(request, await owned_invocation(request)))


@routes.get(f"{INVOCATION}/events", allow_head=False)  # a stream has no HEAD
async def get_events(request: web.Request) -> web.StreamResponse:
    """Ownership is checked by the stream's first read (one statement: owner, status, events)."""
    owner, invocation_id = caller_and_id(request)
    after = last_event_id(request)
    return await serve_stream(request, invocation_id, after, owner=owner)


@routes.post(f"{INVOCATION}/cancel")
async def cancel_invocation(request: web.Request) -> web.Response:
    invocation = await owned_invocation(request)
    if invocation.status.is_terminal:
        return json_response(view(invocation))
    current = await cancel_owned(request, invocation)
    return json_response(await status_document(request, current))


async def cancel_owned(request: web.Request, invocation: Invocation) -> Invocation:
    """Cancel an unfinished invocation the caller owns: a queued one here and now, a running
    one through its worker. Returns it as it stands after."""
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
    await _forget_an_ephemeral_thread(request, invocation)
    return await services.store.get(invocation.id) or invocation


async def _forget_an_ephemeral_thread(request: web.Request, invocation: Invocation) -> None:
    """A cancelled turn of an ephemeral agent deletes the thread it named, as its end would
    have (spec §4.10: the stream's ``finally``), whether it was queued, waiting or running."""
    agents = request.app[AGENT_APP].agents
    if agents is None or invocation.session_id is None:
        return
    store = request.app[SERVICES].store
    try:
        if not agents.keeps_thread(await store.input_of(invocation.id)):
            await store.threads.delete(invocation.owner, invocation.session_id, forget_open=False)
    except StoreError as exc:  # the cancel stands; the thread is the user's to delete
        log.warning("invocation %s: its ephemeral thread was not deleted (%s)", invocation.id, exc)


@routes.get("/api/invocations")
async def list_invocations(request: web.Request) -> web.Response:
    owner = request.app[AUTH].owner(request)
    query = validated(ListQuery, query_of(request), "query")
    page = await request.app[SERVICES].store.list_owned(
        owner,
        status=query.status,
        session_id=query.session_id,
        before_seq=query.cursor,
        limit=query.limit,
    )
    next_cursor = page[-1].seq if len(page) == query.limit else None
    data = await status_documents(request, page)
    return json_response(InvocationPage(data=data, next_cursor=next_cursor))


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    return json_response(HealthResponse(status="ok"))


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """The three checks at once, each given ``READY_WITHIN``: one that has not answered by then is
    unavailable, left to end by itself (a hung server's driver may take seconds to cancel)."""
    services = request.app[SERVICES]
    probes = {
        "database": services.store.ping,
        "broker": services.queue.ping,
        "pubsub": services.pubsub.ping,
    }
    tasks = {name: asyncio.ensure_future(probe()) for name, probe in probes.items()}
    await asyncio.wait(tasks.values(), timeout=READY_WITHIN)
    checks = {name: _readiness(name, task) for name, task in tasks.items()}
    ready = all(v == "ok" for v in checks.values())
    body = ReadyResponse.model_validate(
        {"status": "ready" if ready else "unavailable", "checks": checks}
    )
    return json_response(body, 200 if ready else 503)


def _readiness(name: str, task: asyncio.Future[None]) -> str:
    if not task.done():
        task.cancel()
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no warning
        log.warning("readyz: %s unavailable (no answer in %g s)", name, READY_WITHIN)
        return "unavailable"
    error = task.exception() if not task.cancelled() else asyncio.CancelledError()
    if isinstance(error, SchemaMissing):
        log.warning("readyz: the database is not migrated (run `tether migrate`)")
        return "not_migrated"
    if error is not None:
        log.warning("readyz: %s unavailable (%s)", name, type(error).__name__)
        return "unavailable"
    return "ok"
