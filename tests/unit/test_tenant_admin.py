"""The admin API in-process on the embedded store: admins only (403 in the one error shape),
limits validated in one place (422 naming the field, nothing written), the defaults row kept
apart, set / show / list / remove, the global cap. Every answer is checked against the OpenAPI
document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_gateway_embedded import ClientFactory, client_for
from tests.unit.test_tenant_gateway import ALICE, ROOT, WAITS, post, proxied, set_limits
from tether.gateway.keys import SERVICES
from tether.store.errors import REFUSED_MESSAGE, ValueRefused


async def test_only_admins_reach_the_admin_api(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    for method, path in [
        ("GET", "/api/admin/tenants"),
        ("GET", "/api/admin/tenants/alice"),
        ("PUT", "/api/admin/tenants/alice"),
        ("PATCH", "/api/admin/tenants/alice"),
        ("DELETE", "/api/admin/tenants/alice"),
        ("GET", "/api/admin/defaults"),
        ("PATCH", "/api/admin/defaults"),
        ("GET", "/api/admin/global"),
        ("PUT", "/api/admin/global"),
    ]:
        r = await client.request(method, path, json={"max_active": 1}, headers=ALICE)
        assert r.status == 403, (method, path)
        assert (await r.json())["error"]["code"] == "forbidden"
        nobody = await client.request(method, path, json={"max_active": 1})
        assert nobody.status == 401
    assert await client.app[SERVICES].store.tenants.rows() == []


async def test_dev_with_no_authentication_makes_its_one_user_admin(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await client_for(aiohttp_client, tmp_path)
    assert (await client.get("/api/admin/tenants")).status == 200


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"max_active": -1}, "max_active"),
        ({"max_active": 1.5}, "max_active"),
        ({"weight": 0}, "weight"),
        ({"weight": 5e-324}, "weight"),  # accepted once, then every tenant's claims stalled
        ({"rate": "fast"}, "rate"),
        ({"rate": 1e-320}, "rate"),  # accepted once, then the tenant's accepts were 500s
        ({"rate": 3e9}, "rate"),  # accepted once, then every accept but the first a 422
        ({"rate": 1e308, "burst": 5}, "rate"),
        ({"budget_period": 1e-300}, "budget_period"),  # every agent run of it was a 500
        ({"on_budget": "shrug"}, "on_budget"),
        ({"colour": "red"}, "colour"),
        ({"weight": None}, "weight cannot be lifted"),
        ({"budget_period": None}, "budget_period cannot be lifted"),
    ],
)
async def test_a_limit_no_tenant_may_have_is_a_422_and_nothing_is_written(
    aiohttp_client: ClientFactory, tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    r = await client.patch("/api/admin/tenants/alice", json=change, headers=ROOT)
    assert r.status == 422
    assert field in (await r.json())["error"]["message"]
    assert await client.app[SERVICES].store.tenants.row("alice") is None


@pytest.mark.parametrize("field", ["weight", "rate", "cost_per_period", "budget_period"])
@pytest.mark.parametrize("number", ["1e999", "1" + "0" * 400])  # the whole number was a 500
async def test_a_number_past_a_floats_range_is_a_422_and_nothing_is_written(
    aiohttp_client: ClientFactory, tmp_path: Path, field: str, number: str
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    raw = f'{{"{field}": {number}}}'.encode()
    headers = {**ROOT, "Content-Type": "application/json"}
    r = await client.patch("/api/admin/tenants/alice", data=raw, headers=headers)
    assert r.status == 422
    assert field in (await r.json())["error"]["message"]
    assert await client.app[SERVICES].store.tenants.row("alice") is None


async def test_the_defaults_row_is_not_a_tenant_of_the_tenants_routes(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    r = await client.put("/api/admin/tenants/*", json={"max_active": 1}, headers=ROOT)
    assert r.status == 422 and "defaults" in (await r.json())["error"]["message"]


async def test_set_show_list_and_remove_a_tenant(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    shown = await set_limits(client, "team-a", max_active=3, weight=2, rate=5.5)
    assert shown["own_limits"] and shown["limits"]["max_active"] == 3
    assert shown["limits"]["weight"] == 2.0 and shown["limits"]["burst"] is None
    lifted = await set_limits(client, "team-a", max_active=None)
    assert lifted["limits"]["max_active"] is None and lifted["limits"]["rate"] == 5.5
    replaced = await client.put("/api/admin/tenants/team-a", json={"burst": 4}, headers=ROOT)
    limits = (await replaced.json())["limits"]
    assert (limits["burst"], limits["rate"], limits["weight"]) == (4, None, 1.0)
    await post(client, ALICE, input=WAITS, background=True)
    listing = await (await client.get("/api/admin/tenants", headers=ROOT)).json()
    by_name = {t["tenant"]: t for t in listing["data"]}
    assert set(by_name) == {"team-a", "alice"}
    assert by_name["alice"]["own_limits"] is False
    assert sum(by_name["alice"]["open"].values()) == 1
    gone = await client.delete("/api/admin/tenants/team-a", headers=ROOT)
    assert await gone.json() == {"tenant": "team-a", "removed": True}
    again = await client.delete("/api/admin/tenants/team-a", headers=ROOT)
    assert (await again.json())["removed"] is False
    shown = await (await client.get("/api/admin/tenants/team-a", headers=ROOT)).json()
    assert shown["own_limits"] is False and shown["updated_at"] is None


async def test_the_global_cap_is_set_and_lifted(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    r = await client.put("/api/admin/global", json={"max_active": 7}, headers=ROOT)
    assert await r.json() == {"max_active": 7}
    assert await (await client.get("/api/admin/global", headers=ROOT)).json() == {"max_active": 7}
    bad = await client.put("/api/admin/global", json={"max_active": -2}, headers=ROOT)
    assert bad.status == 422
    lifted = await client.put("/api/admin/global", json={"max_active": None}, headers=ROOT)
    assert await lifted.json() == {"max_active": None}


@pytest.mark.parametrize(
    ("method", "path"),
    [("PATCH", "/api/admin/tenants/alice"), ("PUT", "/api/admin/defaults")],
)
async def test_a_value_the_database_refuses_is_a_422_not_an_internal_error(
    aiohttp_client: ClientFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    path: str,
) -> None:
    """As an accept answers it: the store's verdict on the request's value, never
    ``invocation_failed``."""
    client = await proxied(aiohttp_client, tmp_path)

    async def refuses(*_: Any) -> None:
        raise ValueRefused("NumericValueOutOfRange: integer out of range", REFUSED_MESSAGE)

    monkeypatch.setattr(client.app[SERVICES].store.tenants, "set", refuses)
    r = await client.request(method, path, json={"max_active": 1}, headers=ROOT)
    assert r.status == 422
    assert (await r.json())["error"] == {"code": "invalid_request", "message": REFUSED_MESSAGE}
