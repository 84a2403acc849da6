"""SSE framing: one event is exactly three lines however a client splits lines."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.apps.contract import app as contract_app
from tests.unit.test_gateway_embedded import ClientFactory, client_for
from tether.events import Event
from tether.gateway.frames import frame

FORGED = "end\u2028id: 999\u2029event: run.completed\x85data: {}"


def test_unicode_line_breaks_in_data_are_escaped_so_no_line_can_be_forged() -> None:
    data = {"type": "tick", "text": FORGED, "also": "\u2028\u2029\x85"}
    encoded = frame(Event(7, "tick", data)).decode()
    assert not {"\x85", "\u2028", "\u2029"} & set(encoded)
    lines = encoded.splitlines()  # splits on U+0085, U+2028, U+2029 too
    assert lines == [lines[0], lines[1], lines[2], ""]
    assert lines[0] == "id: 7" and lines[1] == "event: tick"
    assert json.loads(lines[2].removeprefix("data: ")) == data


def test_ordinary_text_is_sent_as_is() -> None:
    data = {"text": "héllo wörld ✓ \U0001f600", "n": 1}
    encoded = frame(Event(1, "tick", data)).decode()
    assert "héllo wörld ✓ \U0001f600" in encoded


async def test_streams_declare_utf8_event_stream_and_carry_escaped_data(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    client = await client_for(aiohttp_client, tmp_path, app=contract_app)
    body: dict[str, Any] = {"id": str(uuid.uuid4()), "input": {"output": FORGED}, "stream": True}
    r = await client.post("/api/invocations", json=body)
    assert r.status == 200
    assert r.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert r.headers["Cache-Control"] == "no-cache, no-transform"
    text = (await r.read()).decode()
    ids = [line for line in text.splitlines() if line.startswith("id:")]
    assert ids == ["id: 1", "id: 2"]  # run.started, run.completed: nothing forged
    completed = [line for line in text.splitlines() if line.startswith("data:")][-1]
    assert json.loads(completed.removeprefix("data: "))["output"]["output"] == FORGED
