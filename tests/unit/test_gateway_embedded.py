"""Gateway behaviours that need special settings, in-process on the embedded store."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.apps.contract import app as contract_app
from tests.openapi_check import checked_trace
from tether import AgentApp, InvocationContext
from tether.cli.compose import dev_app
from tether.gateway.keys import QUEUED, SERVICES, STREAMS
from tether.settings import load_settings
from tether.store.migrate import LEDGER, newest_version
from tether.store.store import StoreUnavailable

ClientFactory = Any


def settings_for(tmp_path: Path, **overrides: Any) -> Any:
    overrides.setdefault("timers", {"shutdown_grace": 0.2})
    return load_settings(None, embedded_path=str(tmp_path / "t.db"), **overrides)


async def client_for(
    aiohttp_client: ClientFactory, tmp_path: Path, app: AgentApp = contract_app, **overrides: Any
) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = await aiohttp_client(
        dev_app(settings_for(tmp_path, **overrides), app), trace_configs=[checked_trace()]
    )
    return client


def body(**kw: Any) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), **kw}


async def test_owner_over_its_limit_gets_429_with_retry_after(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await client_for(
        aiohttp_client,
        tmp_path,
        limits={"max_active_per_owner": 2, "retry_after": 3},
        auth={"mode": "forwarded", "trusted_proxies": ["127.0.0.1/32"]},
    )
    alice, bob = {"X-Forwarded-User": "alice"}, {"X-Forwarded-User": "bob"}
    for _ in range(2):
        r = await client.post(
            "/api/invocations",
            json=body(input={"wait_cancel": True}, background=True),
            headers=alice,
        )
        assert r.status == 202
    r = await client.post("/api/invocations", json=body(input=1, background=True), headers=alice)
    assert r.status == 429 and r.headers["Retry-After"] == "3"
    assert (await r.json())["error"]["code"] == "rate_limited"
    other = await client.post("/api/invocations", json=body(input=1), headers=bob)
    assert other.status == 200


async def test_queue_over_its_admission_limit_gets_503(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await client_for(
        aiohttp_client,
        tmp_path,
        limits={"max_queued": 1},
        worker={"concurrency": 1},
        auth={"mode": "forwarded", "trusted_proxies": ["127.0.0.1/32"]},
    )
    alice = {"X-Forwarded-User": "alice"}
    first = body(input={"wait_cancel": True}, background=True)
    assert (await client.post("/api/invocations", json=first, headers=alice)).status == 202
    queued = body(input=1, background=True)
    assert (await client.post("/api/invocations", json=queued, headers=alice)).status == 202
    await wait_until(lambda: client.app[QUEUED].value(), 1)  # the gauge is read once a second
    r = await client.post("/api/invocations", json=body(input=2, background=True), headers=alice)
    assert r.status == 503 and "Retry-After" in r.headers
    assert (await r.json())["error"]["code"] == "overloaded"
    again = await client.post("/api/invocations", json=queued, headers=alice)  # a known id answers
    assert again.status == 202
    # ... but only to its owner: to anyone else it is as unknown as a fresh id
    stranger = await client.post(
        "/api/invocations", json=queued, headers={"X-Forwarded-User": "mallory"}
    )
    assert stranger.status == 503 and (await stranger.json())["error"]["code"] == "overloaded"


async def wait_until(read: Callable[[], Awaitable[int]], at_least: int, within: float = 10) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while await read() < at_least:
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_custom_routes_are_served(aiohttp_client: ClientFactory, tmp_path: Path) -> None:
    app = AgentApp()

    @app.invoke
    async def run(input: Any, ctx: InvocationContext) -> Any:
        return input

    @app.route("GET", "/hello")
    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"hello": "world"})

    @app.route("GET", "/leave")
    async def leave(request: web.Request) -> web.Response:
        sys.exit("password=hunter2")  # argparse on a bad query does this too

    client = await client_for(aiohttp_client, tmp_path, app=app)
    r = await client.get("/hello")
    assert r.status == 200 and await r.json() == {"hello": "world"}
    r = await client.get("/leave")  # that request's end, not the server's
    assert r.status == 500 and "hunter2" not in await r.text()
    assert (await client.get("/hello")).status == 200


async def test_unknown_routes_and_methods_answer_json(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await client_for(aiohttp_client, tmp_path)
    r = await client.get("/nope")
    assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"
    r = await client.delete("/api/invocations")
    assert r.status == 405 and "error" in await r.json()


async def test_a_forwarded_access_token_from_an_untrusted_peer_is_refused_and_never_stored(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await client_for(aiohttp_client, tmp_path)
    token = "dapi-secret-token-value"
    r = await client.post(
        "/api/invocations", json=body(input=1), headers={"X-Forwarded-Access-Token": token}
    )
    assert r.status == 401 and token not in await r.text()
    assert token.encode() not in (tmp_path / "t.db").read_bytes()


async def test_shutdown_ends_open_streams_with_a_final_comment(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await client_for(aiohttp_client, tmp_path)
    b = body(input={"wait_cancel": True}, background=True)
    await client.post("/api/invocations", json=b)
    r = await client.get(f"/api/invocations/{b['id']}/events")
    first = await r.content.readuntil(b"\n\n")
    assert first.startswith(b"id: 1")
    streams = client.app[STREAMS]
    while not streams:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    await client.app.shutdown()
    rest = await r.content.read()
    assert b": server shutting down, reconnect" in rest


async def test_an_unavailable_database_is_a_503_to_retry_with_no_driver_text(
    aiohttp_client: ClientFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await client_for(aiohttp_client, tmp_path, limits={"retry_after": 2})

    async def unavailable(invocation_ids: list[str]) -> None:
        raise StoreUnavailable("OperationalError: connection to server at db.internal failed")

    monkeypatch.setattr(client.app[SERVICES].store, "get_many", unavailable)
    r = await client.get(f"/api/invocations/{uuid.uuid4()}")
    assert r.status == 503 and r.headers["Retry-After"] == "2"
    body = await r.json()
    assert body["error"] == {
        "code": "overloaded",
        "message": "the database is unavailable; retry later",
    }
    assert "db.internal" not in await r.text()


async def test_a_database_without_this_releases_migrations_is_not_ready_and_refuses_with_503(
    aiohttp_client: ClientFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = await client_for(aiohttp_client, tmp_path)
    assert (await client.get("/readyz")).status == 200
    store = client.app[SERVICES].store
    async with store.engine.begin() as conn:  # as if the code were newer than the database
        await conn.execute(
            sa.text(f"DELETE FROM {LEDGER} WHERE version = :v"), {"v": newest_version("sqlite")}
        )
    r = await client.get("/readyz")
    assert r.status == 503 and (await r.json())["checks"]["database"] == "not_migrated"
    async with store.engine.begin() as conn:  # and without its tables at all
        await conn.execute(sa.text("ALTER TABLE tether_invocations RENAME TO moved_away"))
    try:
        r = await client.post("/api/invocations", json=body(input={}))
        assert r.status == 503 and (await r.json())["error"]["code"] == "overloaded"
        assert "database not migrated on POST" in caplog.text and "Traceback" not in caplog.text
    finally:
        async with store.engine.begin() as conn:
            await conn.execute(sa.text("ALTER TABLE moved_away RENAME TO tether_invocations"))


async def test_readyz_answers_without_waiting_for_a_hung_check_to_cancel(
    aiohttp_client: ClientFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that stops answering hangs its check, and its driver may take seconds more to
    cancel it (psycopg: 5 s + 5 s): /readyz said so only once the cancel had ended. It answers
    now, the hung check unavailable, the others as they are; the check ends later by itself."""
    from tether.gateway import routes

    monkeypatch.setattr(routes, "READY_WITHIN", 0.05)
    client = await client_for(aiohttp_client, tmp_path)
    released = asyncio.Event()

    async def hung() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await released.wait()  # the cancel itself takes until the test lets it end
            raise

    monkeypatch.setattr(client.app[SERVICES].store, "ping", hung)
    r = await client.get("/readyz")
    assert r.status == 503
    assert (await r.json())["checks"] == {"database": "unavailable", "broker": "ok", "pubsub": "ok"}
    released.set()
