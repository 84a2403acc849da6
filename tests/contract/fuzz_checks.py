"""The invariants :class:`tests.contract.fuzz_driver.Fuzz` checks once its run has settled, and
what the driver and they share."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from tests.apps.fuzz_app import SECRET, TIMED_OUT
from tests.client import SseEvent, read_sse
from tests.conftest import ADMIN

TERMINAL = {"completed", "failed", "cancelled"}
TERMINAL_EVENTS = {
    "run.completed": "completed",
    "run.failed": "failed",
    "run.cancelled": "cancelled",
}
OPENERS = {"run.started", "run.resumed"}
READ_TIMEOUT = 60.0


def when(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp)


def who(owner: str) -> dict[str, str]:
    return {"X-Forwarded-Email": owner}


@dataclass
class Known:
    """An id the run used, and what it learned about it."""

    id: str
    owner: str
    input: dict[str, Any]
    session: str | None = None
    accepted: bool = False
    doc: dict[str, Any] = field(default_factory=dict)  # the final status document
    values: dict[str, Any] = field(default_factory=dict)  # wait -> the value that won
    streams: list[tuple[int, list[SseEvent]]] = field(default_factory=list)  # (after, events)
    outputs: list[Any] = field(default_factory=list)  # outputs of sync 200s

    def waits(self) -> list[str]:
        return [f"w{i}" for i, (op, _) in enumerate(self.input["plan"]) if op == "wait"]

    def fails(self) -> bool:
        return any(op == "fail" for op, _ in self.input["plan"])


class Invariants:
    """Checks over what a run learned (``known``) and what the server says now."""

    base: str
    http: aiohttp.ClientSession
    seed: int
    effects: Path
    rng: random.Random
    owners: list[str]
    known: list[Known]
    answers: list[str]
    finals: Counter[str]

    async def call(
        self, method: str, path: str, owner: str, body: Any = None, **kw: Any
    ) -> tuple[int, Any]:
        headers = who(owner)
        if method == "POST":
            headers["Content-Type"] = "application/json"
        data = None if body is None else json.dumps(body)
        async with self.http.request(
            method, f"{self.base}{path}", data=data, headers=headers, **kw
        ) as r:
            text = await r.text()
            self.answers.append(text)
            assert r.status < 500 or r.status == 500 and '"invocation_failed"' in text, (
                method,
                path,
                r.status,
                text,
            )
            return r.status, json.loads(text)

    async def check(self) -> None:
        effects = Counter(self.effects.read_text().splitlines()) if self.effects.exists() else {}
        twice = [line for line, n in effects.items() if n > 1]
        assert not twice, f"step functions that ran twice: {twice}"
        for k in self.known:
            if k.accepted:
                await self.check_one(k)
            else:
                status, _ = await self.call("GET", f"/api/invocations/{k.id}", k.owner)
                assert status == 404
        self.check_sessions()
        for owner in self.owners:
            await self.check_list(owner)
            await self.check_open(owner)
        leaks = [a for a in self.answers if SECRET in a]
        assert not leaks, leaks[:1]

    def summary(self) -> str:
        streams = sum(len(k.streams) for k in self.known)
        return f"seed {self.seed}: {len(self.known)} ids, {dict(self.finals)}, {streams} reads"

    async def check_one(self, k: Known) -> None:
        status, doc = await self.call("GET", f"/api/invocations/{k.id}", k.owner)
        self.finals[doc["status"]] += 1
        k.doc = doc
        assert doc["session_id"] == k.session, doc
        assert status == 200 and doc["status"] in TERMINAL, doc
        log = await self.full_log(k)
        assert [e.id for e in log] == list(range(1, len(log) + 1)), [e.id for e in log]
        ends = [e for e in log if e.type in TERMINAL_EVENTS]
        assert len(ends) == 1 and log[-1] is ends[0], [e.type for e in log]
        assert TERMINAL_EVENTS[ends[0].type] == doc["status"], (doc, ends[0])
        assert doc["last_event_id"] == len(log), (doc, len(log))
        openers = sum(e.type in OPENERS for e in log)
        assert doc["attempt"] == openers, (doc, [e.type for e in log])
        for start, events in k.streams:
            assert events == log[start:], (k.id, start, events, log)
        for after in {0, len(log), self.rng.randint(0, len(log))}:
            status, _ = 200, None
            stream: list[SseEvent] = []
            url = f"{self.base}/api/invocations/{k.id}/events"
            async with self.http.get(url, params={"after": str(after)}, headers=who(k.owner)) as r:
                assert r.status == 200
                stream = await asyncio.wait_for(read_sse(r), READ_TIMEOUT)
            assert stream == log[after:], (k.id, after)
        if doc["status"] == "completed":
            assert not k.fails()
            output = doc["output"]
            assert all(o == output for o in k.outputs), (k.outputs, output)
            waits = k.waits()
            expected = [k.values.get(w, TIMED_OUT) for w in waits]
            assert output["values"] == expected, (output, k.values)
            steps = [line.split()[1] for line in self.effect_lines() if line.startswith(k.id)]
            assert sorted(output["steps"]) == sorted(steps), (output, steps)
        elif doc["status"] == "failed":
            assert k.fails() and doc["error"]["code"] == "invocation_failed", doc
        for other in self.owners:
            if other != k.owner:
                code, _ = await self.call("GET", f"/api/invocations/{k.id}", other)
                assert code == 404

    def check_sessions(self) -> None:
        """Invocations of one session run one at a time, in acceptance order: each one that
        started did so after every earlier one had finished."""
        sessions: dict[str, list[dict[str, Any]]] = {}
        for k in self.known:
            if k.accepted and k.session is not None:
                sessions.setdefault(k.session, []).append(k.doc)
        for docs in sessions.values():
            docs.sort(key=lambda d: d["created_at"])
            for i, doc in enumerate(docs):
                if doc["started_at"] is None:
                    continue
                for earlier in docs[:i]:
                    assert when(earlier["finished_at"]) <= when(doc["started_at"]), (earlier, doc)

    def effect_lines(self) -> list[str]:
        return self.effects.read_text().splitlines() if self.effects.exists() else []

    async def full_log(self, k: Known) -> list[SseEvent]:
        url = f"{self.base}/api/invocations/{k.id}/events"
        async with self.http.get(url, headers=who(k.owner)) as r:
            assert r.status == 200
            return await asyncio.wait_for(read_sse(r), READ_TIMEOUT)

    async def check_list(self, owner: str) -> None:
        seen: list[str] = []
        params: dict[str, str] = {"limit": "7"}
        while True:
            status, page = await self.call("GET", "/api/invocations", owner, params=params)
            assert status == 200, page
            seen += [row["id"] for row in page["data"]]
            if page["next_cursor"] is None:
                break
            params["cursor"] = str(page["next_cursor"])
        mine = {k.id for k in self.known if k.owner == owner and k.accepted}
        assert len(seen) == len(set(seen)), "an invocation listed twice"
        assert set(seen) == mine, set(seen) ^ mine

    async def check_open(self, owner: str) -> None:
        status, view = await self.call("GET", f"/api/admin/tenants/{owner}", ADMIN)
        assert status == 200, view
        assert view["open"] == {"queued": 0, "running": 0, "waiting": 0}, view
