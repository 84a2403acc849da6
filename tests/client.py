"""A small test client for Tether's HTTP API, with an SSE parser.

Sessions come from :func:`tests.openapi_check.open_session`: every answer is checked against the
OpenAPI document as it arrives.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import aiohttp


@dataclass(frozen=True)
class SseEvent:
    id: int
    type: str
    data: Any


def new_id() -> str:
    return str(uuid.uuid4())


async def read_sse(
    response: aiohttp.ClientResponse,
    limit: int | None = None,
    out: list[SseEvent] | None = None,
) -> list[SseEvent]:
    """Read events until the stream ends (or ``limit`` events were read).

    Events are appended to ``out`` (a new list by default) as they arrive, so what was read
    survives a connection that breaks midway.
    """
    events: list[SseEvent] = [] if out is None else out
    fields: dict[str, str] = {}
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith(":"):
            continue
        if line == "":
            if fields:
                events.append(
                    SseEvent(int(fields["id"]), fields["event"], json.loads(fields["data"]))
                )
                fields = {}
                if limit is not None and len(events) >= limit:
                    return events
            continue
        key, _, value = line.partition(": ")
        fields[key] = value
    return events


class Api:
    def __init__(self, session: aiohttp.ClientSession, base: str, owner: str | None = None) -> None:
        self.session = session
        self.base = base
        self.owner = owner or f"user-{uuid.uuid4().hex[:8]}@example.com"

    @property
    def headers(self) -> dict[str, str]:
        """The owner as a trusted proxy would name it; none for an empty owner (the local user
        of a single-user `tether dev`)."""
        return {"X-Forwarded-Email": self.owner} if self.owner else {}

    async def post(self, body: Any, **kw: Any) -> tuple[int, Any]:
        async with self.session.post(
            f"{self.base}/api/invocations", json=body, headers=self.headers, **kw
        ) as r:
            return r.status, await r.json()

    async def post_raw(
        self, data: bytes, content_type: str | None = "application/json"
    ) -> tuple[int, Any, str]:
        import io

        headers = dict(self.headers)
        if content_type is not None:
            headers["Content-Type"] = content_type
        async with self.session.post(
            f"{self.base}/api/invocations", data=io.BytesIO(data), headers=headers
        ) as r:
            return r.status, await r.json(), r.content_type

    async def get(self, invocation_id: str) -> tuple[int, Any]:
        async with self.session.get(
            f"{self.base}/api/invocations/{invocation_id}", headers=self.headers
        ) as r:
            return r.status, await r.json()

    async def cancel(self, invocation_id: str) -> tuple[int, Any]:
        headers = {**self.headers, "Content-Type": "application/json"}  # no body; JSON-only POST
        async with self.session.post(
            f"{self.base}/api/invocations/{invocation_id}/cancel", headers=headers
        ) as r:
            return r.status, await r.json()

    async def page(self, **params: str) -> tuple[int, Any]:
        async with self.session.get(
            f"{self.base}/api/invocations", params=params, headers=self.headers
        ) as r:
            return r.status, await r.json()

    async def send_input(self, invocation_id: str, wait: str, value: Any) -> tuple[int, Any]:
        async with self.session.post(
            f"{self.base}/api/invocations/{invocation_id}/input",
            json={"wait": wait, "value": value},
            headers=self.headers,
        ) as r:
            return r.status, await r.json()

    async def events(
        self,
        invocation_id: str,
        after: int | None = None,
        last_event_id: int | None = None,
        limit: int | None = None,
    ) -> list[SseEvent]:
        params = {"after": str(after)} if after is not None else {}
        headers = dict(self.headers)
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        async with self.session.get(
            f"{self.base}/api/invocations/{invocation_id}/events", params=params, headers=headers
        ) as r:
            assert r.status == 200, await r.text()
            assert r.headers["Content-Type"].startswith("text/event-stream")
            return await read_sse(r, limit)

    async def stream(self, body: dict[str, Any]) -> tuple[aiohttp.ClientResponse, list[SseEvent]]:
        async with self.session.post(
            f"{self.base}/api/invocations", json={**body, "stream": True}, headers=self.headers
        ) as r:
            return r, await read_sse(r)

    async def wait_status(self, invocation_id: str, statuses: set[str], timeout: float = 30) -> Any:  # noqa: ASYNC109
        import asyncio

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            _, body = await self.get(invocation_id)
            if body.get("status") in statuses:
                return body
            if loop.time() > deadline:
                raise TimeoutError(f"{invocation_id} still {body.get('status')}")
            await asyncio.sleep(0.05)


def assert_clean_log(events: list[SseEvent]) -> None:
    """Cursors strictly increasing from 1 with no gap; exactly one terminal event, last."""
    cursors = [e.id for e in events]
    assert cursors == list(range(1, len(events) + 1)), cursors
    terminal = [e for e in events if e.type in {"run.completed", "run.failed", "run.cancelled"}]
    assert len(terminal) == 1 and events[-1] is terminal[0], [e.type for e in events]
