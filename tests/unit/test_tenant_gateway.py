"""Tenants at the gateway, in-process on the embedded store: which tenant a caller is (the
mapping setting, the trusted proxy's header), priorities, the accept's rate limit and
max_queued (429 with Retry-After, nothing written), the admin API's rules, and the metrics.
Every answer is checked against the OpenAPI document."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.unit.test_gateway_embedded import ClientFactory, body, client_for
from tether.gateway.keys import ACCEPTOR, SERVICES
from tether.gateway.tenant_limits import Fresh
from tether.owners import MAX_OWNER_CHARS

PROXY = {"mode": "forwarded", "trusted_proxies": ["127.0.0.1/32"]}
ALICE = {"X-Forwarded-User": "alice"}
ROOT = {"X-Forwarded-User": "root"}
WAITS = {"wait_cancel": True}


async def proxied(
    aiohttp_client: ClientFactory, tmp_path: Path, **auth: Any
) -> TestClient[Any, Any]:
    return await client_for(aiohttp_client, tmp_path, auth={**PROXY, "admins": ["root"], **auth})


async def post(client: TestClient[Any, Any], headers: dict[str, str], **kw: Any) -> Any:
    return await client.post("/api/invocations", json=body(**kw), headers=headers)


async def document(client: TestClient[Any, Any], response: Any) -> dict[str, Any]:
    invocation_id = (await response.json())["id"]
    r = await client.get(f"/api/invocations/{invocation_id}", headers=ALICE)
    assert r.status == 200
    found: dict[str, Any] = await r.json()
    return found


# -- which tenant ---------------------------------------------------------------------------


async def test_an_owner_is_its_own_tenant_unless_the_settings_map_it(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path, tenants={"alice": "team-a"})
    mapped = await document(client, await post(client, ALICE, input=1, background=True))
    assert mapped["tenant"] == "team-a"
    bob = {"X-Forwarded-User": "bob"}
    r = await post(client, bob, input=1, background=True)
    got = await client.get(f"/api/invocations/{(await r.json())['id']}", headers=bob)
    assert (await got.json())["tenant"] == "bob"


async def test_the_trusted_proxys_tenant_header_wins_over_the_mapping(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(
        aiohttp_client, tmp_path, tenants={"alice": "team-a"}, tenant_header="X-Forwarded-Tenant"
    )
    named = {**ALICE, "X-Forwarded-Tenant": "team-b"}
    assert (await document(client, await post(client, named, background=True)))["tenant"] == (
        "team-b"
    )
    assert (await document(client, await post(client, ALICE, background=True)))["tenant"] == (
        "team-a"
    )


@pytest.mark.parametrize("value", ["*", "", "a\tb", "x" * (MAX_OWNER_CHARS + 1)])
async def test_a_tenant_header_naming_no_tenant_is_a_400(
    aiohttp_client: ClientFactory, tmp_path: Path, value: str
) -> None:
    client = await proxied(aiohttp_client, tmp_path, tenant_header="X-Forwarded-Tenant")
    r = await post(client, {**ALICE, "X-Forwarded-Tenant": value}, background=True)
    if value == "":  # an empty header names nobody: the mapping (here, the owner) applies
        assert (await document(client, r))["tenant"] == "alice"
        return
    assert r.status == 400
    assert "X-Forwarded-Tenant" in (await r.json())["error"]["message"]


@pytest.mark.parametrize(
    "auth",
    [
        {"mode": "bearer", "tokens": {"alice": "a" * 20}},
        {"mode": "none"},
        {**PROXY, "trusted_proxies": ["10.0.0.0/8"]},
    ],
    ids=["bearer", "none", "untrusted-peer"],
)
async def test_the_tenant_header_is_refused_from_anyone_but_a_trusted_proxy(
    aiohttp_client: ClientFactory, tmp_path: Path, auth: dict[str, Any]
) -> None:
    client = await client_for(
        aiohttp_client, tmp_path, auth={**auth, "tenant_header": "X-Forwarded-Tenant"}
    )
    headers = {"Authorization": "Bearer " + "a" * 20, "X-Forwarded-Tenant": "team-b"}
    r = await post(client, headers, background=True)
    assert r.status == 401
    assert (await r.json())["error"]["code"] == "unauthenticated"


async def test_every_owner_is_a_tenant_the_admin_api_can_name(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """An owner is its own tenant, so a tenant name is what an owner's may be: 256 characters
    (a 250-character owner's tenant was past the admin API's 200), and printable or not."""
    client = await proxied(aiohttp_client, tmp_path)
    for owner in ["u" * MAX_OWNER_CHARS, "ann\u00a0lee", "zero\u200bwidth"]:
        headers = {"X-Forwarded-User": owner}
        assert (await document_of(client, headers))["tenant"] == owner
        quoted = urllib.parse.quote(owner, safe="")
        shown = await set_limits(client, quoted, max_queued=1)
        assert shown["tenant"] == owner and shown["own_limits"]
        assert (await post(client, headers, input=WAITS, background=True)).status == 429


async def test_the_owner_named_like_the_defaults_is_refused_unless_mapped(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """``*`` names the defaults row, so it is no owner's tenant of its own: the owner ``*``
    is a 400 (nothing written) until ``auth.tenants`` maps it, never the defaults' tenant."""
    star = {"X-Forwarded-User": "*"}
    client = await proxied(aiohttp_client, tmp_path)
    request = body(input=WAITS, background=True)
    r = await client.post("/api/invocations", json=request, headers=star)
    assert r.status == 400
    error = (await r.json())["error"]
    assert error["code"] == "invalid_request" and "auth.tenants" in error["message"]
    assert await client.app[SERVICES].store.get(request["id"]) is None
    (tmp_path / "mapped").mkdir()
    mapped = await proxied(aiohttp_client, tmp_path / "mapped", tenants={"*": "stars"})
    assert (await document_of(mapped, star))["tenant"] == "stars"


async def test_a_bearer_owner_named_like_the_defaults_stops_the_start_unless_mapped(
    tmp_path: Path,
) -> None:
    from tests.unit.test_gateway_embedded import settings_for
    from tether.cli.compose import dev_app
    from tether.gateway.auth import AuthConfigError

    tokens = {"*": "s" * 20}
    with pytest.raises(AuthConfigError, match="auth.tenants"):
        dev_app(settings_for(tmp_path, auth={"mode": "bearer", "tokens": tokens}), _app())
    dev_app(
        settings_for(tmp_path, auth={"mode": "bearer", "tokens": tokens, "tenants": {"*": "s"}}),
        _app(),
    )


async def document_of(client: TestClient[Any, Any], headers: dict[str, str]) -> dict[str, Any]:
    """The status document of a new background invocation of the caller ``headers`` name."""
    r = await post(client, headers, input=WAITS, background=True)
    assert r.status == 202, await r.text()
    got = await client.get(f"/api/invocations/{(await r.json())['id']}", headers=headers)
    found: dict[str, Any] = await got.json()
    return found


async def test_a_mapping_to_an_impossible_tenant_stops_the_start(tmp_path: Path) -> None:
    from tests.unit.test_gateway_embedded import settings_for
    from tether.cli.compose import dev_app
    from tether.gateway.auth import AuthConfigError

    with pytest.raises(AuthConfigError, match="alice"):
        dev_app(settings_for(tmp_path, auth={"tenants": {"alice": "*"}}), _app())


def _app() -> Any:
    from tests.apps.contract import app

    return app


# -- priority -------------------------------------------------------------------------------


@pytest.mark.parametrize("priority", [11, -11, "1", 1.5, True, None])
async def test_a_priority_that_is_no_integer_in_range_is_a_422(
    aiohttp_client: ClientFactory, tmp_path: Path, priority: Any
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    r = await post(client, ALICE, background=True, priority=priority)
    assert r.status == 422
    assert "priority" in (await r.json())["error"]["message"]


async def test_the_priority_is_kept_and_shown(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    for priority in (-10, 0, 10):
        r = await post(client, ALICE, input=WAITS, background=True, priority=priority)
        assert r.status == 202
        assert (await document(client, r))["priority"] == priority


async def test_the_same_id_with_another_priority_is_a_conflict(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    request = body(input=WAITS, background=True, priority=5)
    assert (await client.post("/api/invocations", json=request, headers=ALICE)).status == 202
    again = await client.post("/api/invocations", json=request, headers=ALICE)
    assert again.status == 202  # the same request: the same invocation
    other = await client.post("/api/invocations", json={**request, "priority": 4}, headers=ALICE)
    assert other.status == 409
    # no priority and priority 0 are one request
    plain = body(input=WAITS, background=True)
    assert (await client.post("/api/invocations", json=plain, headers=ALICE)).status == 202
    zero = await client.post("/api/invocations", json={**plain, "priority": 0}, headers=ALICE)
    assert zero.status == 202


# -- rate limits and max_queued -------------------------------------------------------------


async def set_limits(client: TestClient[Any, Any], tenant: str, **limits: Any) -> Any:
    r = await client.patch(f"/api/admin/tenants/{tenant}", json=limits, headers=ROOT)
    assert r.status == 200, await r.text()
    return await r.json()


async def test_a_tenant_past_its_burst_gets_429_with_retry_after_and_nothing_is_written(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path, tenants={"carol": "alice"})
    await set_limits(client, "alice", rate=0.01, burst=2)
    accepted = [body(input=WAITS, background=True) for _ in range(2)]
    for request in accepted:
        assert (await client.post("/api/invocations", json=request, headers=ALICE)).status == 202
    refused = body(input=WAITS, background=True)
    r = await client.post("/api/invocations", json=refused, headers=ALICE)
    assert r.status == 429
    assert (await r.json())["error"]["code"] == "tenant_rate_limited"
    assert int(r.headers["Retry-After"]) >= 1  # a token every 100 s: at least 1 s to wait
    assert await client.app[SERVICES].store.get(refused["id"]) is None
    # a retry of what was accepted is answered as ever, never refused for the empty bucket
    again = await client.post("/api/invocations", json=accepted[0], headers=ALICE)
    assert again.status == 202 and (await again.json())["id"] == accepted[0]["id"]
    changed = {**accepted[1], "input": {"other": 1}}
    assert (await client.post("/api/invocations", json=changed, headers=ALICE)).status == 409
    carol = {"X-Forwarded-User": "carol"}  # of alice's tenant
    elsewhere = await client.post("/api/invocations", json=accepted[0], headers=carol)
    assert elsewhere.status == 429  # another owner's id: refused as any new request
    # another tenant has a bucket of its own (here: none at all)
    bob = {"X-Forwarded-User": "bob"}
    assert (await post(client, bob, input=WAITS, background=True)).status == 202
    metrics = await (await client.get("/api/admin/metrics", headers=ROOT)).text()
    assert 'tether_tenant_throttled_total{reason="rate",tenant="alice"} 2.0' in metrics


async def test_a_tenant_at_max_queued_gets_429_until_one_ends(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    await set_limits(client, "alice", max_queued=1)
    first = await post(client, ALICE, input=WAITS, background=True)
    assert first.status == 202
    r = await post(client, ALICE, input=WAITS, background=True)
    assert r.status == 429 and int(r.headers["Retry-After"]) >= 1
    assert (await r.json())["error"]["code"] == "tenant_queue_full"
    first_id = (await first.json())["id"]
    cancelled = await client.post(f"/api/invocations/{first_id}/cancel", json={}, headers=ALICE)
    assert cancelled.status == 200
    assert (await post(client, ALICE, input=WAITS, background=True)).status == 202
    metrics = await (await client.get("/api/admin/metrics", headers=ROOT)).text()
    assert 'tether_tenant_throttled_total{reason="max_queued",tenant="alice"} 1.0' in metrics


async def test_the_defaults_cap_every_tenant_without_limits_of_its_own(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    r = await client.patch("/api/admin/defaults", json={"max_queued": 0}, headers=ROOT)
    assert r.status == 200 and (await r.json())["limits"]["max_queued"] == 0
    assert (await post(client, ALICE, background=True)).status == 429
    await set_limits(client, "alice", max_queued=None)  # her own row: no cap
    assert (await post(client, ALICE, input=WAITS, background=True)).status == 202


async def test_a_limit_written_by_another_process_applies_within_a_second(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    assert (await post(client, ALICE, input=WAITS, background=True)).status == 202
    # as `tether tenants set` would: straight to the database, this process not told
    await client.app[SERVICES].store.tenants.set("alice", {"max_queued": 1})
    cache = client.app[ACCEPTOR].limits
    cache.forget()  # what a second's age does (see the next test): the limits are read again
    assert (await cache.value()).of("alice").max_queued == 1
    assert (await post(client, ALICE, input=WAITS, background=True)).status == 429


async def test_a_cached_value_is_read_again_once_it_is_a_second_old() -> None:
    now = [0.0]
    reads: list[int] = []

    async def read() -> int:
        reads.append(len(reads))
        return len(reads)

    fresh = Fresh(read, 0, max_age=1.0, clock=lambda: now[0])
    assert await fresh.value() == 1
    now[0] = 1.0
    assert await fresh.value() == 1  # a second old, not older
    now[0] = 1.01
    assert await fresh.value() == 2
    assert len(reads) == 2


# -- metrics ----------------------------------------------------------------------------------


async def test_metrics_count_each_tenants_open_invocations(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path, tenants={"bob": "team-b"})
    await post(client, ALICE, input=WAITS, background=True)
    for _ in range(2):
        await post(client, {"X-Forwarded-User": "bob"}, input=WAITS, background=True)
    text = await (await client.get("/api/admin/metrics", headers=ROOT)).text()
    open_of = {
        tenant: sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("tether_tenant_")
            and f'tenant="{tenant}"' in line
            and line.split("{")[0] in {f"tether_tenant_{n}" for n in ("queued", "running")}
        )
        for tenant in ("alice", "team-b")
    }
    assert open_of == {"alice": 1.0, "team-b": 2.0}
    assert "tether_tenant_waiting" in text


async def test_only_admins_see_the_series_by_tenant_which_name_owners(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await proxied(aiohttp_client, tmp_path)
    await post(client, ALICE, input=WAITS, background=True)
    public = await (await client.get("/metrics")).text()  # no login: counts, never names
    assert "tether_http_requests_total" in public
    assert "alice" not in public and "tenant=" not in public
    assert (await client.get("/api/admin/metrics", headers=ALICE)).status == 403
    assert (await client.get("/api/admin/metrics")).status == 401
    admin = await client.get("/api/admin/metrics", headers=ROOT)
    assert admin.status == 200 and 'tenant="alice"' in await admin.text()


# -- agent turns ------------------------------------------------------------------------------


async def test_an_agent_turn_counts_against_the_callers_tenant(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    from tests.agents.agent_server import Counter, agent_app, parse_sse

    client = await client_for(
        aiohttp_client,
        tmp_path,
        app=agent_app(Counter()),
        auth={**PROXY, "admins": ["root"], "tenants": {"alice": "team-a"}},
        timers={"shutdown_grace": 0.2, "sync_timeout": 10},
    )
    r = await client.post("/api/agents/chat", json={"message": "hi"}, headers=ALICE)
    assert r.status == 200
    stream_id = parse_sse(await r.text())[0]["data"]["data"]["streamId"]
    got = await client.get(f"/api/invocations/{stream_id}", headers=ALICE)
    assert (await got.json())["tenant"] == "team-a"
    await set_limits(client, "team-a", rate=0.01, burst=1)
    r = await client.post("/api/agents/chat", json={"message": "again"}, headers=ALICE)
    assert r.status == 200  # the bucket starts full: one turn
    r = await client.post("/api/agents/chat", json={"message": "more"}, headers=ALICE)
    assert r.status == 429 and "Retry-After" in r.headers
    assert (await r.json())["error"]["code"] == "tenant_rate_limited"
