"""Identity through the real gateway, in-process on the embedded store.

The test client connects from 127.0.0.1, so a trusted "127.0.0.1/32" makes it the proxy, and
any other trusted address makes it a stranger.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from multidict import CIMultiDict

from tests.apps.contract import app as contract_app
from tether.cli.compose import dev_app
from tether.gateway.keys import SERVICES
from tether.owners import MAX_OWNER_CHARS
from tether.settings import load_settings

ClientFactory = Any
Client = TestClient[Any, Any]
TOKEN = "ci-token-0123456789abcdef"
OTHER_TOKEN = "ops-token-0123456789abcdef"
BEHIND_LOOPBACK_PROXY = {"mode": "forwarded", "trusted_proxies": ["127.0.0.1/32"]}
BEHIND_REMOTE_PROXY = {"mode": "forwarded", "trusted_proxies": ["10.0.0.1", "fd00::1"]}
BEARER = {"mode": "bearer", "tokens": {"ci": TOKEN, "ops": OTHER_TOKEN}}


async def gateway(aiohttp_client: ClientFactory, tmp_path: Path, auth: dict[str, Any]) -> Client:
    settings = load_settings(
        None,
        embedded_path=str(tmp_path / "t.db"),
        timers={"shutdown_grace": 0.2},
        auth=auth,
    )
    client: Client = await aiohttp_client(dev_app(settings, contract_app))
    return client


def body(**kw: Any) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "input": 1, **kw}


async def raw_post(client: Client, header: bytes) -> tuple[int, Any]:
    """POST /api/invocations with one header line sent as raw bytes (aiohttp's client would
    refuse to encode what a hostile client can send)."""
    payload = json.dumps(body()).encode()
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(
        b"POST /api/invocations HTTP/1.1\r\nHost: test\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\n" + header + b"\r\n"
        b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
    )
    response = await reader.read()
    writer.close()
    head, _, content = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(content)


def assert_refused(status: int, answer: Any, expected: int, code: str) -> None:
    assert status == expected
    assert answer["error"]["code"] == code and answer["detail"] == answer["error"]["message"]


async def test_a_spoofed_identity_from_an_untrusted_address_is_refused_and_stores_nothing(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await gateway(aiohttp_client, tmp_path, BEHIND_REMOTE_PROXY)
    b = body(background=True)
    r = await client.post("/api/invocations", json=b, headers={"X-Forwarded-User": "boss"})
    assert_refused(r.status, await r.json(), 401, "unauthenticated")
    assert await client.app[SERVICES].store.get(b["id"]) is None


async def test_the_same_identity_from_the_trusted_proxy_is_the_owner(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await gateway(aiohttp_client, tmp_path, BEHIND_LOOPBACK_PROXY)
    alice, bob = {"X-Forwarded-User": "alice"}, {"X-Forwarded-Email": "bob@example.com"}
    b = body()
    r = await client.post("/api/invocations", json=b, headers=alice)
    assert r.status == 200
    assert (await client.get(f"/api/invocations/{b['id']}", headers=alice)).status == 200
    assert (await client.get(f"/api/invocations/{b['id']}", headers=bob)).status == 404


async def test_every_api_route_refuses_a_caller_without_identity(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await gateway(aiohttp_client, tmp_path, BEHIND_LOOPBACK_PROXY)
    some_id = str(uuid.uuid4())
    for method, path in [
        ("POST", "/api/invocations"),
        ("GET", "/api/invocations"),
        ("GET", f"/api/invocations/{some_id}"),
        ("GET", f"/api/invocations/{some_id}/events"),
        ("POST", f"/api/invocations/{some_id}/cancel"),
    ]:
        r = await client.request(method, path, json=body())
        assert_refused(r.status, await r.json(), 401, "unauthenticated")
    assert (await client.get("/healthz")).status == 200  # probes need no identity


async def test_an_over_long_identity_is_refused_whole_not_truncated(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await gateway(aiohttp_client, tmp_path, BEHIND_LOOPBACK_PROXY)
    longest = "a" * MAX_OWNER_CHARS
    b = body()
    assert (
        await client.post("/api/invocations", json=b, headers={"X-Forwarded-User": longest})
    ).status == 200
    r = await client.get(f"/api/invocations/{b['id']}", headers={"X-Forwarded-User": longest + "b"})
    assert_refused(r.status, await r.json(), 400, "invalid_request")


async def test_identity_bytes_that_are_not_utf8_get_a_400_and_spoil_no_other_request(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await gateway(aiohttp_client, tmp_path, BEHIND_LOOPBACK_PROXY)

    async def good(i: int) -> int:
        headers = {"X-Forwarded-User": f"u{i}"}
        return (await client.post("/api/invocations", json=body(), headers=headers)).status

    goods = asyncio.gather(*(good(i) for i in range(4)))
    statuses, (status, answer) = await asyncio.gather(
        goods, raw_post(client, b"X-Forwarded-User: al\xffice\xfe")
    )
    assert_refused(status, answer, 400, "invalid_request")
    assert "UTF-8" in answer["error"]["message"]
    assert statuses == [200] * 4


async def test_none_mode_refuses_identity_headers_instead_of_ignoring_them(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await gateway(aiohttp_client, tmp_path, {"mode": "none"})
    r = await client.post("/api/invocations", json=body(), headers={"X-Forwarded-User": "a"})
    assert_refused(r.status, await r.json(), 401, "unauthenticated")
    assert (await client.post("/api/invocations", json=body())).status == 200


async def test_bearer_mode_requires_a_known_token_and_its_name_is_the_owner(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await gateway(aiohttp_client, tmp_path, BEARER)
    r = await client.post("/api/invocations", json=body())
    assert_refused(r.status, await r.json(), 401, "unauthenticated")
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="tether"'
    wrong = {"Authorization": f"Bearer {TOKEN}0"}
    assert (await client.post("/api/invocations", json=body(), headers=wrong)).status == 401
    b = body()
    ci, ops = {"Authorization": f"Bearer {TOKEN}"}, {"Authorization": f"Bearer {OTHER_TOKEN}"}
    assert (await client.post("/api/invocations", json=b, headers=ci)).status == 200
    assert (await client.get(f"/api/invocations/{b['id']}", headers=ci)).status == 200
    assert (await client.get(f"/api/invocations/{b['id']}", headers=ops)).status == 404


async def test_a_bearer_token_that_is_not_utf8_is_a_401_not_a_500(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await gateway(aiohttp_client, tmp_path, BEARER)
    status, answer = await raw_post(client, b"Authorization: Bearer \xff\xfe" + TOKEN.encode())
    assert_refused(status, answer, 401, "unauthenticated")


async def test_tokens_and_identities_never_reach_the_log(
    aiohttp_client: ClientFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = await gateway(aiohttp_client, tmp_path, BEARER)
    for token in (TOKEN, "a-wrong-token-0123456789"):
        headers = {"Authorization": f"Bearer {token}"}
        await client.post("/api/invocations", json=body(), headers=headers)
    assert TOKEN not in caplog.text and "a-wrong-token" not in caplog.text


@pytest.mark.parametrize(
    "host", ["attacker.example", "attacker.example:8000", "127.0.0.1.attacker.example", "10.0.0.7"]
)
async def test_without_authentication_a_request_addressed_to_another_host_is_refused(
    aiohttp_client: ClientFactory, tmp_path: Path, host: str
) -> None:
    """A web page that rebinds its own name to 127.0.0.1 sends same-origin requests, JSON and
    all: only the Host header tells them from the user's own."""
    client = await gateway(aiohttp_client, tmp_path, {"mode": "none"})
    b = body()
    r = await client.post("/api/invocations", json=b, headers={"Host": host})
    assert_refused(r.status, await r.json(), 403, "forbidden")
    assert host not in (await r.text())
    assert await client.app[SERVICES].store.get(b["id"]) is None
    r = await client.get("/api/admin/tenants", headers={"Host": host})
    assert_refused(r.status, await r.json(), 403, "forbidden")


@pytest.mark.parametrize(
    "host", ["localhost", "LocalHost:8000", "app.localhost:8000", "127.0.0.1:8000", "[::1]:8000"]
)
async def test_without_authentication_this_machine_is_addressed_by_loopback_names(
    aiohttp_client: ClientFactory, tmp_path: Path, host: str
) -> None:
    client = await gateway(aiohttp_client, tmp_path, {"mode": "none"})
    assert (
        await client.post("/api/invocations", json=body(), headers={"Host": host})
    ).status == 200


async def test_with_authentication_the_host_header_is_not_what_decides(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await gateway(aiohttp_client, tmp_path, BEARER)
    headers = {"Host": "tether.example.com", "Authorization": f"Bearer {TOKEN}"}
    assert (await client.post("/api/invocations", json=body(), headers=headers)).status == 200


async def test_two_authorization_headers_are_a_400_whichever_tokens_they_hold(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """A proxy in front may have checked either; Tether used to take the first silently."""
    client = await gateway(aiohttp_client, tmp_path, BEARER)
    b = body(background=True)
    for second in (OTHER_TOKEN, TOKEN):
        headers = CIMultiDict(
            [("Authorization", f"Bearer {TOKEN}"), ("Authorization", f"Bearer {second}")]
        )
        r = await client.post("/api/invocations", json=b, headers=headers)
        assert_refused(r.status, await r.json(), 400, "invalid_request")
        assert TOKEN not in await r.text()
    assert await client.app[SERVICES].store.get(b["id"]) is None
