"""A seeded, randomized driver of the HTTP API; the invariants it checks afterwards are in
:mod:`tests.contract.fuzz_checks`.

:class:`Fuzz` runs a few hundred operations of two owners, several at a time in random
interleavings: POSTs (background, sync, stream; ids reused with the same body, another body,
another owner), cancels, inputs to waits (right and wrong names, competing values), event reads
with random ``after`` or ``Last-Event-ID``, status reads and list pages. The app is
``tests.apps.fuzz_app``. Then it settles every invocation (resolves what still waits) and checks:
one terminal state each; cursors 1..N; every ``after=k`` read and stream a slice of the log; no
step function ran twice; status documents agree with the log; lists show each of an owner's
invocations once and nothing of the other owner's; no handler's message reached a client; the
owners' open counts back to zero. Every answer is also checked against the OpenAPI document (the
session of :func:`tests.openapi_check.open_session`).
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from tests.client import read_sse
from tests.contract.fuzz_checks import READ_TIMEOUT, TERMINAL, Invariants, Known, who

READERS = 24


class Fuzz(Invariants):
    def __init__(
        self, base: str, session: aiohttp.ClientSession, seed: int, effects: Path, ops: int
    ) -> None:
        self.base, self.http, self.seed, self.effects, self.ops = base, session, seed, effects, ops
        self.rng = random.Random(seed)
        tag = uuid.uuid4().hex[:8]
        self.owners = [f"fuzz-{tag}-a@example.com", f"fuzz-{tag}-b@example.com"]
        self.known: list[Known] = []
        self.answers: list[str] = []  # every body received, searched for the secret
        self.readers: set[asyncio.Task[None]] = set()
        self.finals: Counter[str] = Counter()  # terminal statuses, for the summary

    # -- requests -------------------------------------------------------------------------------

    async def read(self, k: Known, after: int | None, last_event_id: int | None) -> None:
        params = {} if after is None else {"after": str(after)}
        headers = who(k.owner)
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        url = f"{self.base}/api/invocations/{self.spelling(k.id)}/events"
        async with self.http.get(url, params=params, headers=headers) as r:
            if not k.accepted:
                assert r.status == 404 or r.status == 200, r.status
                if r.status == 404:
                    return
            assert r.status == 200, (r.status, await r.text())
            events = await asyncio.wait_for(read_sse(r), READ_TIMEOUT)
        start = after if after is not None else (last_event_id or 0)
        k.streams.append((start, events))

    # -- random operations ----------------------------------------------------------------------

    def plan(self) -> list[list[Any]]:
        r = self.rng
        ops: list[list[Any]] = []
        for _ in range(r.randint(0, 4)):
            kind = r.choice(["emit", "emit", "step", "step", "sleep", "wait", "wait", "pause"])
            arg: Any = {
                "emit": r.randint(1, 3),
                "sleep": r.choice([0.05, 0.3, 0.5]),
                "pause": r.choice([0.01, 0.1, 0.3]),
                "wait": r.choice([0, 0, 0.3, 1.0]),
            }.get(kind, 0)
            ops.append([kind, arg])
        if r.random() < 0.15:
            ops.insert(r.randint(0, len(ops)), ["fail", 0])
        return ops

    def pick(self) -> Known | None:
        return self.rng.choice(self.known) if self.known else None

    async def post(self) -> None:
        r = self.rng
        k = self.pick()
        if k is None or r.random() < 0.5:
            owner = r.choice(self.owners)
            session = r.choice([None, None, "s1", "s2"])
            k = Known(
                str(uuid.uuid4()),
                owner,
                {"plan": self.plan(), "effects": str(self.effects)},
                session=None if session is None else f"{owner}-{session}",
            )
            self.known.append(k)
        body_input = k.input
        # another body or another owner only for an accepted id: which of two requests in
        # flight for a new id wins is not the harness's to guess
        same = not k.accepted or r.random() < 0.8
        if not same:
            body_input = {**k.input, "tag": r.randint(0, 9)}
        owner = k.owner if not k.accepted or r.random() < 0.9 else self.other(k.owner)
        body: dict[str, Any] = {"id": self.spelling(k.id), "input": body_input}
        if k.session is not None:
            body["session_id"] = k.session
        mode = r.choice(["background", "sync", "stream"])
        if mode == "background":
            body["background"] = True
        elif mode == "stream":
            body["stream"] = True
            if r.random() < 0.3:
                body["background"] = r.random() < 0.5  # background wins over stream
        await self.post_as(k, owner, body, same and owner == k.owner)

    async def post_as(self, k: Known, owner: str, body: dict[str, Any], same: bool) -> None:
        headers = {**who(owner), "Content-Type": "application/json"}
        resume = self.rng.randint(0, 6) if body.get("stream") and self.rng.random() < 0.3 else 0
        if resume:
            headers["Last-Event-ID"] = str(resume)
        url = f"{self.base}/api/invocations"
        async with self.http.post(url, data=json.dumps(body), headers=headers) as r:
            if r.content_type == "text/event-stream":
                assert same or not k.accepted, "a stream for another request"
                k.accepted = True
                events = await asyncio.wait_for(read_sse(r), READ_TIMEOUT)
                k.streams.append((resume, events))
                return
            text = await r.text()
        self.answers.append(text)
        answer = json.loads(text)
        if not same and k.accepted:
            assert r.status in (409, 404), (r.status, text)  # another body, or another owner
            return
        if r.status == 409 and answer["error"]["code"] == "conflict":
            assert not same, text
            return
        assert r.status in (200, 202, 409, 500), (r.status, text)
        if owner == k.owner:
            k.accepted = True
        if r.status == 200:
            k.outputs.append(answer["output"])
        elif r.status == 500:
            assert answer["error"]["code"] == "invocation_failed", text
        elif r.status == 409:
            assert answer["error"]["code"] == "cancelled", text

    def spelling(self, invocation_id: str) -> str:
        """The id as a client may spell it, in a body or a path: every spelling is the same id."""
        return self.rng.choice(
            [
                invocation_id,
                invocation_id.upper(),
                invocation_id.replace("-", ""),
                f"urn:uuid:{invocation_id}",
                f"{{{invocation_id}}}",
            ]
        )

    async def resolve(self, k: Known, doc: dict[str, Any]) -> None:
        """Send a value to each input wait the status document lists."""
        for wait in doc.get("waiting_for") or []:
            if wait["kind"] == "input":
                value = k.values.get(wait["wait"], "settled")
                path = f"/api/invocations/{k.id}/input"
                code, body = await self.call(
                    "POST", path, k.owner, {"wait": wait["wait"], "value": value}
                )
                assert code in (200, 409), body
                if code == 200:
                    k.values.setdefault(wait["wait"], value)

    def room(self) -> bool:
        """Whether another POST or events read may start: they can hold their connection until
        the run ends (a stream of a waiting run), so they run beside the operations, bounded."""
        self.readers = {task for task in self.readers if not self.finished(task)}
        return len(self.readers) < READERS

    @staticmethod
    def finished(task: asyncio.Task[None]) -> bool:
        if task.done():
            task.result()
            return True
        return False

    def other(self, owner: str) -> str:
        return self.owners[1 - self.owners.index(owner)]

    async def cancel(self) -> None:
        k = self.pick()
        if k is None:
            return
        owner = k.owner if self.rng.random() < 0.85 else self.other(k.owner)
        status, body = await self.call(
            "POST", f"/api/invocations/{self.spelling(k.id)}/cancel", owner
        )
        if owner != k.owner or not k.accepted:
            assert status == 404 or (owner == k.owner and status == 200), (status, body)
        else:
            assert status == 200, (status, body)

    async def send_input(self) -> None:
        k = self.pick()
        if k is None:
            return
        waits = k.waits() or ["w0"]
        wait = self.rng.choice([*waits, "nope"]) if self.rng.random() < 0.2 else waits[0]
        wait = self.rng.choice(waits) if wait != "nope" and self.rng.random() < 0.5 else wait
        value = self.rng.choice(["x", "y", 1, None, {"v": [1, 2]}])
        owner = k.owner if self.rng.random() < 0.9 else self.other(k.owner)
        path = f"/api/invocations/{self.spelling(k.id)}/input"
        status, body = await self.call("POST", path, owner, {"wait": wait, "value": value})
        if owner != k.owner or wait not in k.waits():
            assert status == 404, (status, body)
            return
        assert status in (200, 404, 409), (status, body)
        if status == 200:
            won = k.values.setdefault(wait, value)
            assert won == value, f"two values won {wait}: {won!r}, {value!r}"

    async def status_read(self) -> None:
        k = self.pick()
        if k is None:
            return
        owner = k.owner if self.rng.random() < 0.85 else self.other(k.owner)
        status, body = await self.call("GET", f"/api/invocations/{self.spelling(k.id)}", owner)
        if owner != k.owner:
            assert status == 404, (status, body)
        elif k.accepted:
            assert status == 200, (status, body)

    async def events_read(self) -> None:
        k = self.pick()
        if k is None or not k.accepted:
            return
        after = self.rng.randint(0, 8)
        if self.rng.random() < 0.5:
            await self.read(k, after, None)
        else:
            await self.read(k, None, after)

    async def list_read(self) -> None:
        owner = self.rng.choice(self.owners)
        params = {"limit": str(self.rng.randint(1, 20))}
        if self.rng.random() < 0.3:
            params["status"] = self.rng.choice(sorted(TERMINAL | {"queued", "active", "waiting"}))
        status, body = await self.call("GET", "/api/invocations", owner, params=params)
        assert status == 200, body
        mine = {k.id for k in self.known if k.owner == owner}
        theirs = {k.id for k in self.known if k.owner != owner}
        seen = [row["id"] for row in body["data"]]
        if "status" in params:
            assert {row["status"] for row in body["data"]} <= {params["status"]}, body
        assert not set(seen) & theirs, "another owner's invocation listed"
        assert set(seen) <= mine | {r for r in seen if r not in theirs}

    async def one(self) -> None:
        r = self.rng.random()
        if r < 0.35 and self.room():
            self.readers.add(asyncio.ensure_future(self.post()))
        elif r < 0.45:
            await self.cancel()
        elif r < 0.6:
            await self.send_input()
        elif r < 0.75 and self.room():
            self.readers.add(asyncio.ensure_future(self.events_read()))
        elif r < 0.9:
            await self.status_read()
        else:
            await self.list_read()

    async def run(self, parallel: int = 6) -> None:
        tasks: set[asyncio.Task[None]] = set()
        for _ in range(self.ops):
            while len(tasks) >= parallel:
                done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
            tasks.add(asyncio.ensure_future(self.one()))
            await asyncio.sleep(self.rng.choice([0, 0, 0.01, 0.05]))
        await self.settle(tasks | self.readers)

    async def settle(self, tasks: set[asyncio.Task[None]]) -> None:
        """Resolve every wait still open until each accepted invocation is terminal and the
        requests in flight have ended (a POST still in flight may accept one more)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READ_TIMEOUT
        while True:
            pending = []
            for k in [k for k in self.known if k.accepted]:
                status, doc = await self.call("GET", f"/api/invocations/{k.id}", k.owner)
                assert status == 200, doc
                k.doc = doc
                if doc["status"] not in TERMINAL:
                    pending.append(k)
                    await self.resolve(k, doc)
            if not pending and all(task.done() for task in tasks):
                break
            assert loop.time() < deadline, f"never terminal: {[k.doc for k in pending]}"
            await asyncio.sleep(0.05)
        for task in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(task, BaseException):
                raise task
