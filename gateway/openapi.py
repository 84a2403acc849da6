"""The OpenAPI document, generated from the pydantic models that validate requests."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tether.gateway.models import (
    AcceptedResponse,
    ErrorResponse,
    InvocationPage,
    InvocationRequest,
    InvocationView,
)

MODELS: list[type[BaseModel]] = [
    InvocationRequest,
    InvocationView,
    AcceptedResponse,
    InvocationPage,
    ErrorResponse,
]


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


SSE: dict[str, Any] = {
    "description": "Server-sent events",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}
ERRORS = {
    str(code): _json(ErrorResponse, text)
    for code, text in [
        (400, "Invalid JSON"),
        (404, "Unknown id, or another owner's"),
        (408, "Body not received within timers.body_read_timeout"),
        (409, "Id used for another request"),
        (413, "Body too large"),
        (422, "Validation failed"),
        (429, "Owner over its concurrency limit"),
        (503, "Queue over its admission limit"),
    ]
}
ID_PARAM = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "format": "uuid"},
}


def build_openapi() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in MODELS:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    invocation = "/api/invocations/{id}"
    paths: dict[str, Any] = {
        "/api/invocations": {
            "post": {
                "summary": "Submit an invocation (sync, stream or background)",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref(InvocationRequest)}},
                },
                "responses": {
                    "200": {
                        "description": "Completed (sync), or an SSE stream (stream)",
                        "content": {
                            "application/json": {"schema": _ref(InvocationView)},
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    "202": _json(
                        AcceptedResponse, "Accepted (background, or sync past sync_timeout)"
                    ),
                    "500": _json(ErrorResponse, "The invocation failed (sync)"),
                    **ERRORS,
                },
            },
            "get": {
                "summary": "The caller's invocations, newest first",
                "parameters": [
                    {"name": n, "in": "query", "required": False, "schema": {"type": t}}
                    for n, t in (
                        ("status", "string"),
                        ("session_id", "string"),
                        ("limit", "integer"),
                        ("cursor", "string"),
                    )
                ],
                "responses": {"200": _json(InvocationPage, "A page"), **ERRORS},
            },
        },
        invocation: {
            "get": {
                "summary": "Status and result",
                "parameters": [ID_PARAM],
                "responses": {"200": _json(InvocationView, "The invocation"), **ERRORS},
            },
        },
        f"{invocation}/events": {
            "get": {
                "summary": "Replay events after a cursor, then tail live events",
                "parameters": [
                    ID_PARAM,
                    {
                        "name": "after",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 0},
                    },
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "integer"},
                    },
                ],
                "responses": {"200": SSE, **ERRORS},
            }
        },
        f"{invocation}/cancel": {
            "post": {
                "summary": "Cancel (idempotent)",
                "parameters": [ID_PARAM],
                "responses": {"200": _json(InvocationView, "The invocation"), **ERRORS},
            }
        },
        "/healthz": {
            "get": {"summary": "Liveness", "responses": {"200": {"description": "alive"}}}
        },
        "/readyz": {
            "get": {
                "summary": "Database and pub/sub reachable",
                "responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}},
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {"200": {"description": "text format"}},
            }
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Tether", "version": "0.1.0", "description": "Durable agent server"},
        "paths": paths,
        "components": {"schemas": schemas},
    }
