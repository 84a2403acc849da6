"""``/api/admin/*`` in ``/openapi.json`` (built from :mod:`tether.gateway.admin_models`)."""

from __future__ import annotations

from pydantic import BaseModel

from tether.gateway.admin_models import (
    DefaultsView,
    GlobalChange,
    GlobalView,
    LimitsChange,
    RemovedView,
    TenantList,
    TenantView,
)
from tether.gateway.refusals import Json, answer, json_content, ref, refusals
from tether.store.tenants import MAX_NAME

ADMIN_REQUESTS: list[type[BaseModel]] = [LimitsChange, GlobalChange]
ADMIN_ANSWERS: list[type[BaseModel]] = [
    TenantList,
    TenantView,
    DefaultsView,
    GlobalView,
    RemovedView,
]
TENANT = {
    "name": "tenant",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_NAME},
    "description": "The tenant's name ('*' is refused: the defaults are /api/admin/defaults)",
}
READ_REFUSALS = ("BadIdentity", "Unauthorized", "Forbidden", "InternalError")
WRITE_REFUSALS = (
    "BadJson",
    "Unauthorized",
    "Forbidden",
    "PayloadTooLarge",
    "RequestTimeout",
    "Invalid",
    "InternalError",
)


def _read(summary: str, body: type[BaseModel], parameters: list[Json] | None = None) -> Json:
    operation: Json = {
        "summary": f"{summary} (admins only)",
        "responses": {"200": answer(summary, ref(body)), **refusals(*READ_REFUSALS)},
    }
    if parameters:
        operation["parameters"] = parameters
        operation["responses"].update(refusals("Invalid"))
    return operation


def _write(
    summary: str, request: type[BaseModel], body: type[BaseModel], parameters: list[Json]
) -> Json:
    operation: Json = {
        "summary": f"{summary} (admins only)",
        "requestBody": {"required": True, "content": json_content(ref(request))},
        "responses": {
            "200": answer("As it stands now", ref(body)),
            **refusals(*WRITE_REFUSALS),
        },
    }
    if parameters:
        operation["parameters"] = parameters
    return operation


def admin_paths() -> Json:
    limits = "A limit no tenant may have (the message names it)"
    return {
        "/api/admin/tenants": {
            "get": _read(
                "Every tenant with limits of its own or open invocations, the defaults and the "
                "global cap",
                TenantList,
            )
        },
        "/api/admin/tenants/{tenant}": {
            "get": _read("One tenant: its limits and open invocations", TenantView, [TENANT]),
            "put": _write(
                f"Set every limit of the tenant (left out: none). {limits}: 422",
                LimitsChange,
                TenantView,
                [TENANT],
            ),
            "patch": _write(
                f"Change some limits of the tenant (null lifts one). {limits}: 422",
                LimitsChange,
                TenantView,
                [TENANT],
            ),
            "delete": _read(
                "Remove the tenant's own limits (the defaults apply again)", RemovedView, [TENANT]
            ),
        },
        "/api/admin/defaults": {
            "get": _read("The limits of tenants without their own", DefaultsView),
            "put": _write("Set every default limit", LimitsChange, DefaultsView, []),
            "patch": _write("Change some default limits", LimitsChange, DefaultsView, []),
        },
        "/api/admin/metrics": {
            "get": {
                "summary": "Prometheus metrics by tenant: open invocations, refusals, model "
                "tokens and cost (admins only: a tenant is its owner unless one is named)",
                "responses": {
                    "200": {
                        "description": "Prometheus text format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **refusals(*READ_REFUSALS),
                },
            }
        },
        "/api/admin/global": {
            "get": _read("Deployment-wide limits", GlobalView),
            "put": _write("Set the global cap on running attempts", GlobalChange, GlobalView, []),
        },
    }
