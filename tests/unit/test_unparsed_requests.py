"""A request aiohttp cannot parse gets the API's JSON error naming the fault, never the bytes it
sent (a token in a malformed header stays out of the answer and the log), and closes."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.inprocess import served
from tests.rawhttp import RawConnection
from tether.gateway.unparsed import install

SECRET = "SECRET-TOKEN-123"
MALFORMED = [
    (f"Authorization: Bearer {SECRET}\x01abc", None),  # which words: the parser's fault class
    (f"X-Long: {SECRET}{'x' * 9000}", "the request line or a header is too long"),
    (f"Content-Length: 5\r\nTransfer-Encoding: chunked\r\nX-Token: {SECRET}", None),
]


@pytest.mark.parametrize(("header", "said"), MALFORMED)
async def test_an_unparsable_request_is_a_json_400_that_quotes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, header: str, said: str | None
) -> None:
    caplog.set_level(logging.DEBUG)
    async with served(tmp_path) as server:
        connection = await RawConnection.open(server.base)
        try:
            raw = f"GET /api/invocations HTTP/1.1\r\nHost: x\r\n{header}\r\n\r\n"
            await connection.send(raw.encode("latin-1"))
            head = await connection.read_head()
            body = await connection.read_to_end()  # the connection is closed after it
        finally:
            connection.close()
    assert head.status == 400
    assert head.headers["content-type"].startswith("application/json")
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_request"
    if said is not None:
        assert error["message"] == said
    assert SECRET not in body.decode("latin-1")
    assert SECRET not in caplog.text
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert "not valid HTTP" in caplog.text


async def test_bytes_that_are_not_http_on_a_new_connection_are_logged_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with served(tmp_path) as server:
        connection = await RawConnection.open(server.base)
        try:
            await connection.send(
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 / HTTP/1.1\r\n\r\n"
            )
            head = await connection.read_head()
        finally:
            connection.close()
    assert head.status == 400
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "HTTP" in r.message]


async def test_a_fault_no_middleware_answered_is_a_json_500_logged_with_its_traceback(
    aiohttp_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    install()

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError(SECRET)

    app = web.Application()
    app.router.add_get("/broken", broken)
    client = await aiohttp_client(app)
    r = await client.get("/broken")
    assert r.status == 500 and SECRET not in await r.text()
    assert (await r.json())["error"]["code"] == "invocation_failed"
    [record] = [r for r in caplog.records if r.name == "tether.gateway.unparsed"]
    assert record.levelno == logging.ERROR and record.exc_info is not None
