"""Tenants on both servers (`tether dev` and the distributed gateway): the admin API, a limit
changed through it and applied at once, the accept's rate limit and max_queued, priorities, the
trusted proxy's tenant header, and the per-tenant metrics. Each test names tenants of its own
(the servers are shared), and never touches the defaults. Every answer is checked against the
OpenAPI document."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aiohttp

from tests.client import Api, new_id
from tests.conftest import ADMIN, TENANT_HEADER
from tests.harness import Cluster
from tests.openapi_check import open_session

WAITS = {"wait_cancel": True}


def tenant_of_test() -> str:
    return f"team-{uuid.uuid4().hex[:8]}"


def as_user(owner: str, tenant: str | None = None) -> dict[str, str]:
    headers = {"X-Forwarded-Email": owner}
    return {**headers, TENANT_HEADER: tenant} if tenant else headers


ROOT = as_user(ADMIN)


async def call(
    api: Api, method: str, path: str, headers: dict[str, str], body: Any = None
) -> tuple[int, Any, aiohttp.ClientResponse]:
    async with api.session.request(
        method, f"{api.base}{path}", json=body, headers=headers
    ) as response:
        return response.status, await response.json(), response


async def submit(api: Api, headers: dict[str, str], **fields: Any) -> tuple[int, Any, Any]:
    body = {"id": new_id(), "input": WAITS, "background": True, **fields}
    status, answer, response = await call(api, "POST", "/api/invocations", headers, body)
    return status, answer, response


async def test_only_an_admin_reaches_the_admin_api(api: Api) -> None:
    status, body, _ = await call(api, "GET", "/api/admin/tenants", as_user(api.owner))
    assert (status, body["error"]["code"]) == (403, "forbidden")
    status, body, _ = await call(api, "PATCH", "/api/admin/defaults", as_user(api.owner), {})
    assert status == 403
    status, body, _ = await call(api, "GET", "/api/admin/tenants", ROOT)
    assert status == 200 and "defaults" in body


async def test_a_limit_changed_through_the_api_applies_at_once(api: Api) -> None:
    tenant = tenant_of_test()
    user = as_user(api.owner, tenant)
    status, body, _ = await call(
        api, "PATCH", f"/api/admin/tenants/{tenant}", ROOT, {"max_queued": 0}
    )
    assert status == 200 and body["limits"]["max_queued"] == 0
    status, body, response = await submit(api, user)
    assert (status, body["error"]["code"]) == (429, "tenant_queue_full")
    assert int(response.headers["Retry-After"]) >= 1
    await call(api, "PATCH", f"/api/admin/tenants/{tenant}", ROOT, {"max_queued": 1})
    status, first, _ = await submit(api, user)
    assert status == 202
    status, body, _ = await submit(api, user)
    assert status == 429  # one open: the cap
    shown = (await call(api, "GET", f"/api/admin/tenants/{tenant}", ROOT))[1]
    assert sum(shown["open"].values()) == 1 and shown["own_limits"]
    await api.cancel(first["id"])
    await api.wait_status(first["id"], {"cancelled"})  # a running one ends through its worker
    status, again, _ = await submit(api, user)
    assert status == 202
    await api.cancel(again["id"])
    status, body, _ = await call(api, "DELETE", f"/api/admin/tenants/{tenant}", ROOT)
    assert body == {"tenant": tenant, "removed": True}


async def test_a_tenant_past_its_burst_gets_429_with_retry_after(api: Api) -> None:
    tenant = tenant_of_test()
    user = as_user(api.owner, tenant)
    limits = {"rate": 0.01, "burst": 2}
    assert (await call(api, "PUT", f"/api/admin/tenants/{tenant}", ROOT, limits))[0] == 200
    accepted = []
    for _ in range(2):
        status, body, _ = await submit(api, user)
        assert status == 202
        accepted.append(body["id"])
    refused_id = new_id()
    status, body, response = await submit(api, user, id=refused_id)
    assert (status, body["error"]["code"]) == (429, "tenant_rate_limited")
    assert int(response.headers["Retry-After"]) >= 1
    assert (await api.get(refused_id))[0] == 404  # nothing was written
    for invocation_id in accepted:
        await api.cancel(invocation_id)
    await call(api, "DELETE", f"/api/admin/tenants/{tenant}", ROOT)


async def test_priority_and_tenant_are_on_the_status_document(api: Api) -> None:
    tenant = tenant_of_test()
    status, body, _ = await submit(api, as_user(api.owner, tenant), priority=7)
    assert status == 202
    status, document = await api.get(body["id"])
    assert (document["tenant"], document["priority"]) == (tenant, 7)
    await api.cancel(body["id"])
    status, plain, _ = await submit(api, as_user(api.owner))
    assert (await api.get(plain["id"]))[1]["tenant"] == api.owner  # by default, its owner
    await api.cancel(plain["id"])


async def test_an_out_of_range_priority_is_a_422_and_another_one_a_conflict(api: Api) -> None:
    status, body, _ = await submit(api, as_user(api.owner), priority=11)
    assert status == 422 and "priority" in body["error"]["message"]
    request = {"id": new_id(), "priority": 1}
    assert (await submit(api, as_user(api.owner), **request))[0] == 202
    assert (await submit(api, as_user(api.owner), **{**request, "priority": 2}))[0] == 409
    await api.cancel(str(request["id"]))


async def test_the_metrics_show_each_tenants_open_invocations(api: Api) -> None:
    tenant = tenant_of_test()
    status, body, _ = await submit(api, as_user(api.owner, tenant))
    assert status == 202
    line = f'tenant="{tenant}"'
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:  # a scrape reads the counts at most once a second
        async with api.session.get(f"{api.base}/api/admin/metrics", headers=ROOT) as response:
            text = await response.text()
        if any(line in row and not row.startswith("#") for row in text.splitlines()):
            break
        assert loop.time() < deadline, "the tenant never showed in /api/admin/metrics"
        await asyncio.sleep(0.2)
    async with api.session.get(f"{api.base}/metrics") as response:  # no login: no names
        assert tenant not in await response.text()
    await api.cancel(body["id"])


async def test_the_global_cap_is_read_and_written(api: Api) -> None:
    status, before, _ = await call(api, "GET", "/api/admin/global", ROOT)
    assert status == 200
    status, body, _ = await call(
        api, "PUT", "/api/admin/global", ROOT, {"max_active": before["max_active"]}
    )
    assert (status, body) == (200, before)
    status, body, _ = await call(api, "PUT", "/api/admin/global", ROOT, {"max_active": -1})
    assert status == 422


async def test_a_limit_written_straight_to_the_database_applies_within_a_second(
    cluster: tuple[Cluster, str],
) -> None:
    """As `tether tenants set` does, from another process: the gateway was not told, and its
    next accepts (it reads the limits at most a second late) are refused."""
    from tether.store.store import Store

    c, base = cluster
    tenant = tenant_of_test()
    owner = f"user-{uuid.uuid4().hex[:8]}@example.com"
    store = Store.postgres(c.database_url, pool_size=1)
    try:
        await store.tenants.set(tenant, {"max_queued": 0})
        async with open_session() as session:
            api = Api(session, base, owner)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while True:
                status, body, _ = await submit(api, as_user(owner, tenant))
                if status == 429:
                    assert body["error"]["code"] == "tenant_queue_full"
                    break
                assert status == 202 and loop.time() < deadline, "the limit never applied"
                await api.cancel(body["id"])
                await asyncio.sleep(0.1)
        await store.tenants.remove(tenant)
    finally:
        await store.close()
