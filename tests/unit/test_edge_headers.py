"""Headers every answer carries, whoever built it: Tether's routes, aiohttp's own refusals,
custom routes, and the answer to a request aiohttp cannot parse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.inprocess import served
from tests.rawhttp import RawConnection
from tether import AgentApp

app = AgentApp(name="edge")


@app.invoke
async def invoke(input: Any, ctx: Any) -> Any:
    return input


@app.route("GET", "/custom")
async def custom(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def answer_headers(tmp_path: Path, method: str, path: str) -> Any:
    """The headers of the answer to ``method path`` (its body read)."""
    async with (
        served(tmp_path, app) as server,
        aiohttp.ClientSession() as http,
        http.request(method, server.base + path) as response,
    ):
        await response.read()
    return response.headers


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/healthz"),
        ("GET", "/api/invocations"),
        ("GET", "/nowhere"),  # aiohttp's 404, in the error shape
        ("OPTIONS", "/api/invocations"),  # its 405
        ("GET", "/custom"),
    ],
)
async def test_no_answer_names_the_python_or_aiohttp_version(
    tmp_path: Path, method: str, path: str
) -> None:
    assert (await answer_headers(tmp_path, method, path))["Server"] == "tether"


async def test_the_answer_to_an_unparsable_request_names_no_version(tmp_path: Path) -> None:
    async with served(tmp_path, app) as server:
        connection = await RawConnection.open(server.base)
        try:
            await connection.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n")
            head = await connection.read_head()
        finally:
            connection.close()
    assert head.status == 400
    assert head.headers["server"] == "tether"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/invocations"),
        ("GET", "/api/invocations/00000000-0000-0000-0000-000000000001"),  # its 404
        ("GET", "/api/admin/tenants"),
    ],
)
async def test_private_answers_are_never_stored_by_a_cache(
    tmp_path: Path, method: str, path: str
) -> None:
    assert (await answer_headers(tmp_path, method, path))["Cache-Control"] == "no-store"


async def test_a_stream_keeps_its_own_cache_control(tmp_path: Path) -> None:
    body = {"id": "00000000-0000-0000-0000-0000000000e1", "input": 1, "stream": True}
    async with (
        served(tmp_path, app) as server,
        aiohttp.ClientSession() as http,
        http.post(server.base + "/api/invocations", json=body) as response,
    ):
        await response.read()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    assert response.headers["Cache-Control"] == "no-cache, no-transform"


async def test_a_custom_route_outside_the_api_decides_its_own_caching(tmp_path: Path) -> None:
    async with (
        served(tmp_path, app) as server,
        aiohttp.ClientSession() as http,
        http.get(server.base + "/custom") as response,
    ):
        await response.read()
    assert "Cache-Control" not in response.headers
