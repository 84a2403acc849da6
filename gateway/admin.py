"""The admin API: tenants' limits, the defaults and the global cap, changed at run time
(docs/operations.md "Tenants and limits"). Admins only (:meth:`Tenancy.require_admin`): 401 for
an unknown caller, 403 for anyone else, before anything is read.

Limits are validated once, by :class:`tether.store.tenants.TenantLimits` (a
:class:`LimitInvalid` is a 422 with its message). A change is in the database when the answer
leaves; this process's accepts see it at once, every other process's within a second.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tether.errors import ErrorCode
from tether.gateway.admin_models import (
    DefaultsView,
    GlobalChange,
    GlobalView,
    LimitsChange,
    LimitsView,
    RemovedView,
    TenantList,
    TenantView,
)
from tether.gateway.keys import ACCEPTOR, SERVICES, TENANCY
from tether.gateway.parsing import read_json, validated
from tether.gateway.responses import ApiError, json_response
from tether.gateway.tenancy import tenant_name
from tether.outcomes import iso_utc
from tether.store.tenants import DEFAULTS, LimitInvalid, TenantLimits, TenantRow, Tenants

routes = web.RouteTableDef()
TENANT = "/api/admin/tenants/{tenant}"


def admin_tenants(request: web.Request) -> Tenants:
    """The store's tenants, once the caller is known to be an admin."""
    request.app[TENANCY].require_admin(request)
    return request.app[SERVICES].store.tenants


def path_tenant(request: web.Request) -> str:
    try:
        return tenant_name(request.match_info["tenant"])
    except LimitInvalid as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, message=f"tenant: {exc}") from None


async def changes(request: web.Request, *, replace: bool) -> dict[str, Any]:
    """The limits a PUT (every limit: what it leaves out has none) or PATCH sets."""
    body = validated(LimitsChange, await read_json(request))
    given = body.model_dump(exclude_unset=True)
    return {**TenantLimits().to_json(), **given} if replace else given


async def write(
    tenants: Tenants, request: web.Request, tenant: str, change: dict[str, Any]
) -> None:
    try:
        await tenants.set(tenant, change)
    except LimitInvalid as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, message=str(exc)) from None
    request.app[ACCEPTOR].limits.forget()


async def tenant_view(tenants: Tenants, tenant: str) -> TenantView:
    row = await tenants.row(tenant)
    applied = (await tenants.effective([tenant]))[tenant]
    counts = (await tenants.open_counts([tenant])).get(tenant)
    return TenantView.of(tenant, row, applied, counts)


def defaults_view(row: TenantRow | None) -> DefaultsView:
    limits = row.limits if row is not None else TenantLimits()
    updated = iso_utc(row.updated_at) if row is not None else None
    return DefaultsView(limits=LimitsView.of(limits), updated_at=updated)


@routes.get("/api/admin/tenants")
async def list_tenants(request: web.Request) -> web.Response:
    tenants = admin_tenants(request)
    rows = {row.tenant: row for row in await tenants.rows()}
    counts = await tenants.open_counts()
    defaults = rows.pop(DEFAULTS, None)
    applied = defaults.limits if defaults is not None else TenantLimits()
    data = [
        TenantView.of(name, rows.get(name), applied, counts.get(name))
        for name in sorted({*rows, *counts})
    ]
    body = TenantList(
        data=data,
        defaults=defaults_view(defaults),
        global_max_active=await tenants.global_max_active(),
    )
    return json_response(body)


@routes.get(TENANT)
async def show_tenant(request: web.Request) -> web.Response:
    tenants = admin_tenants(request)
    return json_response(await tenant_view(tenants, path_tenant(request)))


@routes.put(TENANT)
async def replace_tenant(request: web.Request) -> web.Response:
    return await set_tenant(request, replace=True)


@routes.patch(TENANT)
async def patch_tenant(request: web.Request) -> web.Response:
    return await set_tenant(request, replace=False)


async def set_tenant(request: web.Request, *, replace: bool) -> web.Response:
    tenants = admin_tenants(request)
    tenant = path_tenant(request)
    await write(tenants, request, tenant, await changes(request, replace=replace))
    return json_response(await tenant_view(tenants, tenant))


@routes.delete(TENANT)
async def remove_tenant(request: web.Request) -> web.Response:
    tenants = admin_tenants(request)
    tenant = path_tenant(request)
    removed = await tenants.remove(tenant)
    request.app[ACCEPTOR].limits.forget()
    return json_response(RemovedView(tenant=tenant, removed=removed))


@routes.get("/api/admin/defaults")
async def show_defaults(request: web.Request) -> web.Response:
    tenants = admin_tenants(request)
    return json_response(defaults_view(await tenants.row(DEFAULTS)))


@routes.put("/api/admin/defaults")
async def replace_defaults(request: web.Request) -> web.Response:
    return await set_defaults(request, replace=True)


@routes.patch("/api/admin/defaults")
async def patch_defaults(request: web.Request) -> web.Response:
    return await set_defaults(request, replace=False)


async def set_defaults(request: web.Request, *, replace: bool) -> web.Response:
    tenants = admin_tenants(request)
    await write(tenants, request, DEFAULTS, await changes(request, replace=replace))
    return json_response(defaults_view(await tenants.row(DEFAULTS)))


@routes.get("/api/admin/global")
async def show_global(request: web.Request) -> web.Response:
    tenants = admin_tenants(request)
    return json_response(GlobalView(max_active=await tenants.global_max_active()))


@routes.put("/api/admin/global")
async def set_global(request: web.Request) -> web.Response:
    tenants = admin_tenants(request)
    body = validated(GlobalChange, await read_json(request))
    try:
        await tenants.set_global_max_active(body.max_active)
    except LimitInvalid as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, message=str(exc)) from None
    return json_response(GlobalView(max_active=await tenants.global_max_active()))
