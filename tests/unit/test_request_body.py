"""Request bodies arrive whole and in time, or get a clear answer; a client that hangs up is no
error. In process, on the embedded services served as ``tether dev`` serves them, with a raw
socket playing the misbehaving client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.inprocess import served
from tests.rawhttp import RawConnection, request
from tests.unit.test_gateway_embedded import body


@contextlib.asynccontextmanager
async def dev_server(tmp_path: Path, **overrides: Any) -> AsyncIterator[str]:
    async with served(tmp_path, **overrides) as server:
        yield server.base


def upload_head(length: int, **headers: str) -> bytes:
    headers.update({"Content-Type": "application/json", "Content-Length": str(length)})
    return request("POST", "/api/invocations", headers)


async def metrics_text(base: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as r:
        return await r.text()


async def test_a_silent_upload_gets_408_in_the_error_shape(tmp_path: Path) -> None:
    timers = {"body_read_timeout": 0.3, "shutdown_grace": 0.2}
    async with dev_server(tmp_path, timers=timers) as base:
        silent = await RawConnection.open(base)
        try:
            await silent.send(upload_head(100) + b'{"id": ')  # and then nothing
            head = await silent.read_head()
            answer = json.loads(await silent.read_body(head))
        finally:
            silent.close()
        assert 'status="408"' in await metrics_text(base)
    assert head.status == 408 and head.headers["connection"] == "close"
    assert answer["error"]["code"] == "request_timeout"
    assert answer["detail"] == answer["error"]["message"]


async def test_a_path_is_logged_as_sent_so_an_encoded_newline_cannot_forge_a_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    timers = {"body_read_timeout": 0.3, "shutdown_grace": 0.2}
    async with dev_server(tmp_path, timers=timers) as base:
        silent = await RawConnection.open(base)
        try:
            head = {"Content-Type": "application/json", "Content-Length": "100"}
            await silent.send(request("POST", "/x%0A2026-01-01%20ERROR%20forged", head))
            assert (await silent.read_head()).status == 408
        finally:
            silent.close()
    lines = [r.getMessage() for r in caplog.records if "not received within" in r.getMessage()]
    assert lines == ["POST /x%0A2026-01-01%20ERROR%20forged: request body not received within 0.3s"]


async def test_a_client_that_hangs_up_mid_upload_is_logged_as_no_error_and_counted_as_499(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tether")
    async with dev_server(tmp_path) as base:
        quitter = await RawConnection.open(base)
        await quitter.send(upload_head(1000, Expect="100-continue"))
        assert (await quitter.read_head()).status == 100  # the server is reading the body now
        await quitter.send(b'{"id": "')
        quitter.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        metrics = ""
        while 'status="499"' not in metrics:
            assert loop.time() < deadline, f"the hang-up was never counted:\n{metrics}"
            await asyncio.sleep(0.02)
            metrics = await metrics_text(base)
    assert 'status="500"' not in metrics
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert any("disconnected mid-upload" in r.getMessage() for r in caplog.records)


async def test_an_oversized_body_is_still_413_payload_too_large(tmp_path: Path) -> None:
    async with (
        dev_server(tmp_path, limits={"max_body_bytes": 1024}) as base,
        aiohttp.ClientSession() as session,
        session.post(f"{base}/api/invocations", json=body(input="x" * 2048)) as r,
    ):
        assert r.status == 413
        assert (await r.json())["error"]["code"] == "payload_too_large"


async def test_a_body_that_arrives_in_time_is_handled_as_before(tmp_path: Path) -> None:
    async with (
        dev_server(tmp_path) as base,
        aiohttp.ClientSession() as session,
        session.post(f"{base}/api/invocations", json=body(input={"output": 7})) as r,
    ):
        assert r.status == 200
        assert (await r.json())["output"]["output"] == 7


async def test_a_sync_caller_that_hangs_up_before_its_answer_is_counted_as_499(
    tmp_path: Path,
) -> None:
    """docs/operations.md: a client that hangs up "mid-upload or before its answer" is counted
    as 499, not as the answer nobody received."""
    async with dev_server(tmp_path) as base:
        quitter = await RawConnection.open(base)
        payload = json.dumps(body(input={"sleep": 0.5})).encode()
        await quitter.send(upload_head(len(payload)) + payload)
        await asyncio.sleep(0.1)  # the body is read; the sync wait has begun
        quitter.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        metrics = ""
        while 'route="/api/invocations",status=' not in metrics:
            assert loop.time() < deadline, f"the request was never counted:\n{metrics}"
            await asyncio.sleep(0.05)
            metrics = await metrics_text(base)
    assert 'route="/api/invocations",status="499"' in metrics
    assert 'route="/api/invocations",status="200"' not in metrics


async def test_an_unknown_callers_upload_is_refused_at_once_its_body_never_awaited(
    tmp_path: Path,
) -> None:
    """The caller is known before its body is read: a stranger cannot make the server wait
    ``body_read_timeout`` for a trickling upload, nor hold a body up to ``max_body_bytes``; the
    connection closes, or aiohttp would read the unread body to its end (up to 10 s)."""
    token = "body-token-0123456789abcdef"
    auth = {"mode": "bearer", "tokens": {"ci": token}}
    async with dev_server(tmp_path, auth=auth, timers={"body_read_timeout": 600}) as base:
        for head in (upload_head(100), upload_head(100, Authorization="Bearer wrong-0123456789")):
            silent = await RawConnection.open(base)
            try:
                await silent.send(head + b'{"id": ')  # and then nothing
                answer = await silent.read_head(timeout=60)
                refusal = json.loads(await silent.read_body(answer))
            finally:
                silent.close()
            assert answer.status == 401 and refusal["error"]["code"] == "unauthenticated"
            assert answer.headers["connection"] == "close"  # the rest is never read either
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{base}/api/invocations", json=body(), headers={"Authorization": f"Bearer {token}"}
            ) as r,
        ):
            assert r.status == 200  # the known caller's upload is read and handled as before
