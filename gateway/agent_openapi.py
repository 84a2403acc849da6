"""``/api/agents/*`` in ``/openapi.json`` (built from :mod:`tether.gateway.agent_models`)."""

from __future__ import annotations

from pydantic import BaseModel

from tether.errors import ErrorCode
from tether.gateway.agent_models import (
    AgentsInfo,
    ApproveRequest,
    ApproveResponse,
    CancelRequest,
    CancelResponse,
    ChatRequest,
    DeletedResponse,
    ResponsesRequest,
    ResponsesResponse,
    ThreadView,
)
from tether.gateway.models import AcceptedResponse
from tether.gateway.refusals import (
    Json,
    answer,
    ended_schema,
    error_schema,
    json_content,
    ref,
    refusals,
)

AGENT_REQUESTS: list[type[BaseModel]] = [
    ChatRequest,
    ResponsesRequest,
    ApproveRequest,
    CancelRequest,
]
AGENT_ANSWERS: list[type[BaseModel]] = [
    ApproveResponse,
    CancelResponse,
    DeletedResponse,
    ThreadView,
    AgentsInfo,
    ResponsesResponse,
]
RESPONSES_SSE: Json = {
    "schema": {
        "description": "OpenAI Responses stream events (response.output_item.added, "
        "response.output_text.delta, response.output_item.done, response.completed, "
        "response.failed, error) and appkit.* events (metadata first, with threadId and "
        "streamId; approval_pending with stream_id); `: ping` comments; the last frame of each "
        "stored event carries `id: <cursor>`",
        "type": "object",
    }
}
NOT_AGENTS = "No such thread or stream, another owner's, or an app that serves no agents"
THREAD_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
STREAM_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "format": "uuid"},
}
POST_REFUSALS = (
    "BadJson",
    "Unauthorized",
    "PayloadTooLarge",
    "RequestTimeout",
    "UnsupportedMediaType",
    "Invalid",
)


NO_RETRY = {
    "x-should-retry": {
        "description": "false on a run that ended: posting again would start a new run "
        "(OpenAI's client library retries a 409 or 500 unless told not to)",
        "schema": {"const": "false"},
    }
}


def _not_found(text: str = NOT_AGENTS) -> Json:
    return {"404": answer(text, error_schema(ErrorCode.NOT_FOUND))}


def _post(summary: str, body: type[BaseModel], responses: Json) -> Json:
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": json_content(ref(body))},
            "responses": {**refusals(*POST_REFUSALS, "InternalError"), **responses},
        }
    }


def agent_paths() -> Json:
    stream = {
        "description": "The Responses event stream",
        "content": {"text/event-stream": RESPONSES_SSE},
    }
    turn_refusals = {
        **_not_found("A given threadId the caller has no thread of; or no agents"),
        **refusals("RateLimited", "Overloaded"),
    }
    return {
        "/api/agents/chat": _post(
            "One chat turn as a durable invocation in the thread's session: its Responses stream",
            ChatRequest,
            {"200": stream, **turn_refusals},
        ),
        "/api/agents/chat/{id}": {
            "get": {
                "summary": "Follow a chat turn's Responses stream again (Last-Event-ID)",
                "parameters": [STREAM_ID],
                "responses": {
                    "200": stream,
                    **refusals("BadIdentity", "Unauthorized", "Invalid", "InternalError"),
                    **_not_found(),
                },
            }
        },
        "/api/agents/invocations": _post(
            "OpenAI Responses for the default agent, on a new thread (sync, or stream)",
            ResponsesRequest,
            {
                "200": {
                    "description": "Completed (or the stream with stream: true)",
                    "content": {
                        **json_content(ref(ResponsesResponse)),
                        "text/event-stream": RESPONSES_SSE,
                    },
                },
                "202": answer(
                    "Still running after timers.sync_timeout, or waiting", ref(AcceptedResponse)
                ),
                "409": answer(
                    "Cancelled",
                    ended_schema("cancelled", {"const": "cancelled"}),
                    NO_RETRY,
                ),
                "500": answer(
                    "The run failed (a fixed message), or a server error",
                    {"oneOf": [ended_schema("failed", {}), error_schema()]},
                    NO_RETRY,
                ),
                **turn_refusals,
            },
        ),
        "/api/agents/cancel": _post(
            "Cancel a chat turn (idempotent: unknown streams answer the same)",
            CancelRequest,
            {"200": answer("Cancelled, or nothing to cancel", ref(CancelResponse))},
        ),
        "/api/agents/approve": _post(
            "Decide a pending approval of a chat turn (its durable wait)",
            ApproveRequest,
            {
                "200": answer("The decision", ref(ApproveResponse)),
                **_not_found("Stream not found or already completed; approval not found"),
                "409": answer(
                    "Decided otherwise already, or not waiting for it",
                    error_schema(ErrorCode.CONFLICT),
                ),
            },
        ),
        "/api/agents/threads/{id}": {
            "get": {
                "summary": "The caller's thread, newest agents.max_thread_messages messages",
                "parameters": [THREAD_ID],
                "responses": {
                    "200": answer("The thread", ref(ThreadView)),
                    **refusals("BadIdentity", "Unauthorized", "InternalError"),
                    **_not_found(),
                },
            },
            "delete": {
                "summary": "Delete the caller's thread",
                "parameters": [THREAD_ID],
                "responses": {
                    "200": answer("Deleted", ref(DeletedResponse)),
                    **refusals("BadIdentity", "Unauthorized", "InternalError"),
                    **_not_found(),
                },
            },
        },
        "/api/agents/info": {
            "get": {
                "summary": "The agents this app serves and its default agent",
                "responses": {
                    "200": answer("Agents", ref(AgentsInfo)),
                    **refusals("BadIdentity", "Unauthorized", "InternalError"),
                    **_not_found(),
                },
            }
        },
    }
