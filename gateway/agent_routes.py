"""``/api/agents/*``: AppKit's agents routes (spec §4.8), mapped onto durable invocations.

A chat turn is an invocation whose session is the thread, so it runs after the thread's earlier
turns, survives a worker's death and can be followed again (``GET /api/agents/chat/{id}`` or the
invocation's own ``/events``). The stream id AppKit clients approve and cancel by is the
invocation id. Every route authenticates first, and another owner's invocation or thread is
answered exactly as an unknown one. The gateway knows the agent app only through
``AgentApp.agents`` (``tether.agent_surface``), never the runtime itself.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from tether.agent_surface import AgentsSurface
from tether.app import InputRejected
from tether.channels import events_channel
from tether.errors import ErrorCode
from tether.gateway.agent_models import (
    THREAD_ID,
    AgentsInfo,
    ApproveRequest,
    ApproveResponse,
    CancelRequest,
    CancelResponse,
    ChatRequest,
    DeletedResponse,
    ResponsesRequest,
    ThreadMessageView,
    ThreadView,
)
from tether.gateway.agent_responses import responses_answer
from tether.gateway.agent_stream import serve_translated
from tether.gateway.checks import caller_credential, checked_input
from tether.gateway.keys import AGENT_APP, AUTH, SERVICES, SETTINGS, TENANCY
from tether.gateway.models import AcceptedResponse, canonical_uuid
from tether.gateway.parsing import read_json, validated
from tether.gateway.responses import ApiError, json_response
from tether.gateway.routes import (
    PATH_ID,
    accept,
    admit,
    answer_ended,
    cancel_owned,
    canonical_input,
    last_event_id,
    wait_until_terminal,
)
from tether.jsonvalue import request_hash
from tether.outcomes import iso_utc
from tether.store.errors import StoreError
from tether.store.journal import InputAnswer
from tether.store.schema import Invocation, NewInvocation, Status

log = logging.getLogger(__name__)
routes = web.RouteTableDef()
STREAM_GONE = "Stream not found or already completed"
APPROVAL_GONE = "Approval not found or already settled"


def surface(request: web.Request) -> AgentsSurface:
    agents = request.app[AGENT_APP].agents
    if agents is None:
        raise ApiError(ErrorCode.NOT_FOUND, message="this app serves no agents")
    return agents


def agent_input(build: Any, *args: Any) -> Any:
    try:
        return build(*args)
    except InputRejected as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, message=str(exc)[:1000]) from None


async def start_turn(
    request: web.Request, owner: str, thread_id: str, value: Any, mode: str
) -> Invocation:
    """Accept one agent turn as a new invocation in the thread's session."""
    tenant = request.app[TENANCY].tenant(request, owner)
    credential = caller_credential(request, owner, checked_input(request, value))
    invocation_id = str(uuid.uuid4())
    await admit(request, invocation_id, owner)
    input_text = canonical_input(value)
    new = NewInvocation(
        invocation_id,
        owner,
        thread_id,
        value,
        request_hash(input_text, thread_id),
        user_auth=credential is not None,
        tenant=tenant,
        input_text=input_text,
    )
    accepted = await accept(request, new, mode, credential)
    if not surface(request).keeps_thread(value):
        return accepted.invocation  # an ephemeral agent's turn: no thread to start
    # Only once accepted: a refused turn (a cap, a rate) leaves no thread. The run's first
    # append creates the thread too, so which of the two comes first does not matter, and a
    # failure here must not answer an error for a turn that was accepted and will run.
    try:
        await request.app[SERVICES].store.threads.ensure(owner, thread_id, invocation_id)
    except StoreError as exc:
        log.warning(
            "invocation %s: its thread is left to its run to write (%s)", invocation_id, exc
        )
    return accepted.invocation


@routes.post("/api/agents/chat")
async def chat(request: web.Request) -> web.StreamResponse:
    owner = request.app[AUTH].owner(request)
    agents = surface(request)
    body = validated(ChatRequest, await read_json(request))
    value = agent_input(agents.chat_input, body.message, body.agent, body.skill)
    store = request.app[SERVICES].store
    thread_id = body.threadId or str(uuid.uuid4())
    if body.threadId is not None and not await store.threads.exists(owner, thread_id):
        raise ApiError(ErrorCode.NOT_FOUND, message="Thread not found")
    invocation = await start_turn(request, owner, thread_id, value, "stream")
    return await serve_translated(
        request, agents.translator(invocation.id), invocation, thread_id, 0
    )


@routes.get("/api/agents/chat/" + PATH_ID, allow_head=False)  # a stream has no HEAD
async def follow_chat(request: web.Request) -> web.StreamResponse:
    """The same Responses stream again, after ``Last-Event-ID`` (or ``?after=``)."""
    owner = request.app[AUTH].owner(request)
    agents = surface(request)
    after = last_event_id(request)
    invocation = await owned(request, owner, request.match_info["id"])
    if invocation is None or invocation.session_id is None:
        raise ApiError(ErrorCode.NOT_FOUND)
    translator = agents.translator(invocation.id)
    return await serve_translated(request, translator, invocation, invocation.session_id, after)


@routes.post("/api/agents/invocations")
async def responses(request: web.Request) -> web.StreamResponse:
    owner = request.app[AUTH].owner(request)
    agents = surface(request)
    body = validated(ResponsesRequest, await read_json(request))
    items = (
        body.input
        if isinstance(body.input, str)
        else [i.model_dump(exclude_none=True) for i in body.input]
    )
    value = agent_input(agents.responses_input, items)
    thread_id = str(uuid.uuid4())  # a new thread per request, as the reference
    services = request.app[SERVICES]
    if body.stream:
        invocation = await start_turn(request, owner, thread_id, value, "stream")
        return await serve_translated(
            request, agents.translator(invocation.id), invocation, thread_id, 0
        )
    limit = request.app[SETTINGS].timers.sync_timeout
    invocation = await start_turn(request, owner, thread_id, value, "sync")
    async with services.pubsub.subscribe(events_channel(invocation.id)) as sub:
        current = await services.store.get(invocation.id) or invocation
        current = await wait_until_terminal(request, current, sub, limit)
    if current.status is Status.COMPLETED:
        return await responses_answer(request, agents, current, int(time.time()))
    if current.status.is_terminal:
        ended = answer_ended(current)
        # an outcome, not a fault: OpenAI's client library would post again (a new run)
        ended.headers["x-should-retry"] = "false"
        return ended
    return json_response(AcceptedResponse.of(current), 202)


async def owned(request: web.Request, owner: str, raw_id: str) -> Invocation | None:
    try:
        invocation_id = canonical_uuid(raw_id)
    except ValueError:
        return None
    invocation = await request.app[SERVICES].store.get(invocation_id)
    return invocation if invocation is not None and invocation.owner == owner else None


@routes.post("/api/agents/cancel")
async def cancel(request: web.Request) -> web.Response:
    """Idempotent: an unknown, finished or another owner's stream is ``{"cancelled": true}``
    too, and is left as it is."""
    owner = request.app[AUTH].owner(request)
    body = validated(CancelRequest, await read_json(request))
    invocation = await owned(request, owner, body.streamId)
    if invocation is not None and not invocation.status.is_terminal:
        await cancel_owned(request, invocation)
    return json_response(CancelResponse(cancelled=True))


ANSWERS: dict[InputAnswer, tuple[ErrorCode, str] | None] = {
    InputAnswer.RESUMED: None,
    InputAnswer.ALREADY: None,
    InputAnswer.UNKNOWN: (ErrorCode.NOT_FOUND, APPROVAL_GONE),
    InputAnswer.CONFLICT: (ErrorCode.CONFLICT, "the approval was already decided otherwise"),
    InputAnswer.TIMED_OUT: (ErrorCode.CONFLICT, "the approval timed out"),
    InputAnswer.NOT_WAITING: (ErrorCode.CONFLICT, "the run is not waiting for this approval"),
}


@routes.post("/api/agents/approve")
async def approve(request: web.Request) -> web.Response:
    """AppKit's body, resolving the run's durable approval wait (as ``/input`` would)."""
    owner = request.app[AUTH].owner(request)
    body = validated(ApproveRequest, await read_json(request))
    invocation = await owned(request, owner, body.streamId)
    if invocation is None or invocation.status.is_terminal:
        raise ApiError(ErrorCode.NOT_FOUND, message=STREAM_GONE)
    services = request.app[SERVICES]
    result = await services.store.journal.resolve_input(
        invocation.id, body.approvalId, {"decision": body.decision}
    )
    refused = ANSWERS[result]
    if refused is not None:
        raise ApiError(refused[0], message=refused[1])
    if result is InputAnswer.RESUMED:
        await services.queue.send([invocation.id])
    return json_response(ApproveResponse(decision=body.decision))


def path_thread_id(request: web.Request) -> str:
    """The thread id in the path, by the body's ``threadId`` rules; 404 when it breaks them
    (no such thread can exist)."""
    try:
        return THREAD_ID.validate_python(request.match_info["id"])
    except ValidationError:
        raise ApiError(ErrorCode.NOT_FOUND, message="Thread not found") from None


@routes.get("/api/agents/threads/" + PATH_ID)
async def get_thread(request: web.Request) -> web.Response:
    owner = request.app[AUTH].owner(request)
    keep = request.app[SETTINGS].agents.max_thread_messages
    found = await request.app[SERVICES].store.threads.get(owner, path_thread_id(request), keep)
    if found is None:
        raise ApiError(ErrorCode.NOT_FOUND, message="Thread not found")
    messages = [
        ThreadMessageView(
            role="assistant" if m.role == "assistant" else "user",
            content=m.content,
            createdAt=iso_utc(m.created_at) or "",
        )
        for m in found.messages
    ]
    view = ThreadView(
        id=found.id,
        createdAt=iso_utc(found.created_at) or "",
        updatedAt=iso_utc(found.updated_at) or "",
        messages=messages,
    )
    return json_response(view)


@routes.delete("/api/agents/threads/" + PATH_ID)
async def delete_thread(request: web.Request) -> web.Response:
    owner = request.app[AUTH].owner(request)
    if not await request.app[SERVICES].store.threads.delete(owner, path_thread_id(request)):
        raise ApiError(ErrorCode.NOT_FOUND, message="Thread not found")
    return json_response(DeletedResponse(deleted=True))


@routes.get("/api/agents/info")
async def info(request: web.Request) -> web.Response:
    request.app[AUTH].owner(request)
    return json_response(AgentsInfo.model_validate(surface(request).info()))
