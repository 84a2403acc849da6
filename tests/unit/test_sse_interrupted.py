"""A stream whose status line is out ends as a stream ends when a re-read fails: a comment, the
last chunk, and nothing else on the connection (no second response with the error); the client
reconnects with ``after`` and loses nothing."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.client import assert_clean_log, read_sse
from tests.inprocess import served
from tests.rawhttp import RawConnection, complete_events, dechunk, request
from tests.unit.test_sse_limits import finished, gated_app, start
from tether.gateway.keys import METRICS, SERVICES, STREAM_READS
from tether.store.errors import StoreUnavailable


async def test_a_stream_whose_reread_fails_ends_cleanly_and_resumes_losing_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gate = asyncio.Event()
    quick_pings = {"ping_interval": 0.1}  # a quiet stream re-reads the store at each ping
    async with (
        served(tmp_path, app=gated_app(gate), timers=quick_pings) as server,
        aiohttp.ClientSession(server.base) as client,
    ):
        invocation_id = await start(client, {"before": 2, "after": 3})
        reader = await RawConnection.open(server.base)
        path = f"/api/invocations/{invocation_id}/events"
        await reader.send(request("GET", path, {"Connection": "close"}))
        assert (await reader.read_head()).status == 200
        reads = server.app[STREAM_READS]

        async def unavailable(*args: Any) -> Any:
            raise StoreUnavailable("the database is unavailable")

        monkeypatch.setattr(reads, "read", unavailable)
        body = await reader.read_to_end()
        reader.close()
        monkeypatch.undo()
        assert b"HTTP/1.1" not in body  # one response on the connection, not two
        assert body.endswith(b"0\r\n\r\n")  # the stream's last chunk
        text = dechunk(body).decode()
        assert text.endswith(": stream interrupted, reconnect\n\n")
        first = complete_events(text)
        assert [e.type for e in first] == ["run.started", "tick", "tick"]
        gate.set()
        await finished(server.app[SERVICES], invocation_id)
        async with client.get(path, params={"after": str(first[-1].id)}) as r:
            rest = await read_sse(r)
    assert_clean_log(first + rest)
    assert [e.type for e in rest] == ["tock", "tock", "tock", "run.completed"]
    [warning] = [r for r in caplog.records if "stream interrupted" in r.getMessage()]
    assert warning.levelno == logging.WARNING and invocation_id in warning.getMessage()


class Clock:
    """A ``time`` stand-in whose ``perf_counter`` returns ``readings`` in turn."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def perf_counter(self) -> float:
        return self.readings.pop(0)


async def test_a_streams_request_time_is_to_its_first_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tether_http_request_seconds`` as its help says: a stream's observation ends when its
    status line goes out (at 10.5 here), not when the stream ends (at 100)."""
    from tether.gateway import app as app_module
    from tether.gateway import sse as sse_module

    async with (
        served(tmp_path) as server,
        aiohttp.ClientSession(server.base) as client,
    ):
        invocation_id = await start(client, {"emit": 3})
        await finished(server.app[SERVICES], invocation_id)
        monkeypatch.setattr(app_module, "time", Clock(10.0, 100.0))  # the request's start, end
        monkeypatch.setattr(sse_module, "time", Clock(10.5))  # its status line
        async with client.get(f"/api/invocations/{invocation_id}/events") as r:
            assert len(await read_sse(r)) == 5
        monkeypatch.undo()
        registry = server.app[METRICS].registry
        route = {"method": "GET", "route": "/api/invocations/{id}/events"}
        assert registry.get_sample_value("tether_http_request_seconds_sum", route) == 0.5
