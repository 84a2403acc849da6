"""``/openapi.json``, generated from the models the gateway validates requests with and builds
every JSON answer from (:mod:`tether.gateway.models`)."""

from __future__ import annotations

import copy
import functools
import json

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import models_json_schema

from tether.errors import ErrorCode
from tether.events import EVENT_TYPE
from tether.gateway.admin_openapi import ADMIN_ANSWERS, ADMIN_REQUESTS, admin_paths
from tether.gateway.agent_openapi import AGENT_ANSWERS, AGENT_REQUESTS, agent_paths
from tether.gateway.models import (
    AcceptedResponse,
    CompletedResponse,
    Cursor,
    ErrorResponse,
    HealthResponse,
    InputRequest,
    InvocationErrorResponse,
    InvocationPage,
    InvocationRequest,
    InvocationView,
    ListQuery,
    ParkedResponse,
    ReadyResponse,
)
from tether.gateway.refusals import (
    REF,
    Json,
    answer,
    components,
    ended_schema,
    error_schema,
    json_content,
    ref,
    refusals,
)

REQUESTS: list[type[BaseModel]] = [InvocationRequest, InputRequest]
ANSWERS: list[type[BaseModel]] = [
    CompletedResponse,
    AcceptedResponse,
    ParkedResponse,
    InvocationView,
    InvocationPage,
    ErrorResponse,
    InvocationErrorResponse,
    HealthResponse,
    ReadyResponse,
]
SSE: Json = {
    "schema": {
        "description": "One event; frames `id: <cursor>\\nevent: <type>\\ndata: <json>\\n\\n` "
        "and `: ping` comments, closed after the terminal event (run.completed, run.failed or "
        "run.cancelled)",
        "type": "object",
        "required": ["id", "event", "data"],
        "properties": {
            "id": {"type": "string", "pattern": "^[1-9][0-9]*$", "description": "The cursor"},
            "event": {"type": "string", "pattern": EVENT_TYPE.pattern},
            "data": {"type": "string", "contentMediaType": "application/json"},
        },
    }
}
ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}


def cursor_parameters() -> list[Json]:
    schema = TypeAdapter(Cursor).json_schema()
    text = schema.pop("description")
    return [
        {"name": "after", "in": "query", "required": False, "schema": schema, "description": text},
        {
            "name": "Last-Event-ID",
            "in": "header",
            "required": False,
            "schema": schema,
            "description": f"Used when `after` is absent (EventSource reconnects). {text}",
        },
    ]


def query_parameters(model: type[BaseModel], schemas: Json) -> list[Json]:
    """One query parameter per field of ``model``; ``X | None`` fields become optional X."""
    schema = model.model_json_schema(ref_template=REF)
    schemas.update(schema.pop("$defs", {}))
    out = []
    for name, prop in schema["properties"].items():
        prop.pop("title", None)
        if prop.get("default", 0) is None:
            del prop["default"]
        variants = [v for v in prop.pop("anyOf", []) if v != {"type": "null"}]
        if len(variants) == 1:
            prop.update(variants[0])
        text = prop.pop("description", None)
        parameter = {"name": name, "in": "query", "required": False, "schema": prop}
        out.append(parameter if text is None else {**parameter, "description": text})
    return out


def component_schemas() -> Json:
    _, top = models_json_schema(
        [(m, "validation") for m in [*REQUESTS, *AGENT_REQUESTS, *ADMIN_REQUESTS]]
        + [(m, "serialization") for m in [*ANSWERS, *AGENT_ANSWERS, *ADMIN_ANSWERS]],
        ref_template=REF,
    )
    schemas: Json = top["$defs"]
    return schemas


def invocations_path(schemas: Json) -> Json:
    return {"post": submit_operation(), "get": list_operation(schemas)}


def submit_operation() -> Json:
    return {
        "summary": "Submit an invocation: sync (default), stream or background",
        "parameters": cursor_parameters(),
        "requestBody": {"required": True, "content": json_content(ref(InvocationRequest))},
        "responses": {
            "200": {
                "description": "Sync: the run completed. Stream: the events, even when the "
                "run fails",
                "content": {**json_content(ref(CompletedResponse)), "text/event-stream": SSE},
            },
            "202": answer(
                "Background, or sync still running after timers.sync_timeout, or (sync) parked "
                "with what it waits for",
                {"oneOf": [ref(AcceptedResponse), ref(ParkedResponse)]},
            ),
            **refusals("BadJson", "Unauthorized"),
            "409": answer(
                "The id was used for another request or by another owner (one answer for "
                "both), or (sync) the run was cancelled",
                {
                    "oneOf": [
                        error_schema(ErrorCode.CONFLICT),
                        ended_schema("cancelled", {"const": ErrorCode.CANCELLED.value}),
                    ]
                },
            ),
            **refusals(
                "PayloadTooLarge",
                "RequestTimeout",
                "UnsupportedMediaType",
                "Invalid",
                "RateLimited",
            ),
            "500": answer(
                "Sync: the run failed (a fixed message, never the exception text); or an "
                "unexpected server error",
                {"oneOf": [ended_schema("failed", {}), error_schema()]},
            ),
            **refusals("Overloaded"),
        },
    }


def list_operation(schemas: Json) -> Json:
    return {
        "summary": "The caller's invocations, newest first",
        "parameters": query_parameters(ListQuery, schemas),
        "responses": {
            "200": answer("A page", ref(InvocationPage)),
            **refusals("BadIdentity", "Unauthorized", "Invalid", "InternalError"),
        },
    }


def invocation_paths() -> Json:
    one = "/api/invocations/{id}"
    return {
        one: {"get": status_operation()},
        f"{one}/events": {"get": events_operation()},
        f"{one}/cancel": {"post": cancel_operation()},
        f"{one}/input": {"post": input_operation()},
    }


STATUS = answer("The status document", ref(InvocationView))


def status_operation() -> Json:
    return {
        "summary": "Status and result",
        "parameters": [ID],
        "responses": {
            "200": STATUS,
            **refusals("BadIdentity", "Unauthorized", "NotFound", "InternalError"),
        },
    }


def events_operation() -> Json:
    return {
        "summary": "Replay the events after a cursor, then tail the live ones",
        "parameters": [ID, *cursor_parameters()],
        "responses": {
            "200": {"description": "Server-sent events", "content": {"text/event-stream": SSE}},
            **refusals("BadIdentity", "Unauthorized", "NotFound", "Invalid", "InternalError"),
        },
    }


def cancel_operation() -> Json:
    return {
        "summary": "Cancel (idempotent); a finished invocation is returned unchanged",
        "parameters": [ID],
        "requestBody": {
            "required": False,
            "description": "Ignored; the Content-Type must still be JSON",
            "content": json_content({"type": "object"}),
        },
        "responses": {
            "200": STATUS,
            **refusals(
                "BadIdentity", "Unauthorized", "NotFound", "UnsupportedMediaType", "InternalError"
            ),
        },
    }


def input_operation() -> Json:
    return {
        "summary": "Resolve a wait of a parked invocation (owner only, idempotent)",
        "parameters": [ID],
        "requestBody": {"required": True, "content": json_content(ref(InputRequest))},
        "responses": {
            "200": STATUS,
            **refusals("BadJson", "Unauthorized", "NotFound"),
            "409": answer(
                "The wait was resolved otherwise, or the invocation is not waiting for it",
                error_schema(ErrorCode.CONFLICT),
            ),
            **refusals(
                "PayloadTooLarge",
                "RequestTimeout",
                "UnsupportedMediaType",
                "Invalid",
                "InternalError",
            ),
        },
    }


def service_paths() -> Json:
    ready = ref(ReadyResponse)
    return {
        "/healthz": {
            "get": {
                "summary": "Liveness",
                "responses": {"200": answer("Alive", ref(HealthResponse))},
            }
        },
        "/readyz": {
            "get": {
                "summary": "Database, broker and pub/sub reachable",
                "responses": {
                    "200": answer("Ready", ready),
                    "503": answer("Not ready (the same body)", ready),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics: counts and latencies, no owners or tenants (by "
                "tenant: /api/admin/metrics)",
                "responses": {
                    "200": {
                        "description": "Prometheus text format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {"200": answer("OpenAPI 3.1", {"type": "object"})},
            }
        },
    }


def build_openapi() -> Json:
    """A fresh document (deep-copied: the constants it is made of stay untouched by its users)."""
    schemas = component_schemas()
    paths = {
        "/api/invocations": invocations_path(schemas),
        **invocation_paths(),
        **agent_paths(),
        **admin_paths(),
        **service_paths(),
    }
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "Tether",
            "version": "0.1.0",
            "description": "Durable agent server. Every error answer has one shape "
            "(ErrorResponse); a method a path does not serve gets 405 with `Allow` "
            "(components/responses/MethodNotAllowed), and an unknown path 404. A server "
            "without authentication answers 403 to every request whose Host header does not "
            "name this machine (docs/security.md).",
        },
        "paths": paths,
        "components": {"schemas": schemas, "responses": components()},
    }
    return copy.deepcopy(document)


@functools.cache
def openapi_text() -> str:
    """The document as served (built once per process)."""
    return json.dumps(build_openapi(), separators=(",", ":"))
