"""When a freed slot claims at once (``tether.worker.refills``): the rule alone, then
``tether dev`` with its periodic claim pass an hour away, so that only a freed slot's claim can
start work whose token came when it could not run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from tests.inprocess import served
from tests.unit.test_gateway_embedded import body
from tether.worker.refills import FreedSlots

NO_PASS = {"claim_poll": 3600.0}


def rule(busy: int = 1) -> FreedSlots:
    freed = FreedSlots(lambda: busy)
    freed.every_token_comes_here()
    return freed


def test_where_other_processes_take_tokens_a_freed_slot_always_claims() -> None:
    freed = FreedSlots(lambda: 1)
    freed.started_nothing(token=False)
    assert freed.claims()


def test_the_sole_process_claims_until_a_claim_alone_finds_nothing() -> None:
    freed = rule()
    assert freed.claims()  # at start: work may be queued from before
    freed.started_nothing(token=False)
    assert not freed.claims()
    freed.token_unserved()
    assert freed.claims()


def test_a_claim_that_finds_nothing_beside_others_clears_no_doubt() -> None:
    freed = rule(busy=2)  # another attempt runs: it may hold the turn or cap work waits for
    freed.started_nothing(token=False)
    assert freed.claims()


def test_a_token_that_started_nothing_makes_freed_slots_claim() -> None:
    freed = rule()
    freed.started_nothing(token=False)
    freed.started_nothing(token=True)
    assert freed.claims()


async def post(http: aiohttp.ClientSession, base: str, **kw: Any) -> str:
    sent = body(background=True, **kw)
    async with http.post(f"{base}/api/invocations", json=sent) as r:
        assert r.status == 202, await r.text()
    return str(sent["id"])


async def until_status(
    http: aiohttp.ClientSession, base: str, invocation_id: str, status: str
) -> None:
    for _ in range(400):
        async with http.get(f"{base}/api/invocations/{invocation_id}") as r:
            if (await r.json())["status"] == status:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{invocation_id} never became {status}")


async def test_a_sessions_next_invocation_starts_when_the_first_ends(tmp_path: Path) -> None:
    async with served(tmp_path, timers=NO_PASS) as server, aiohttp.ClientSession() as http:
        first = await post(http, server.base, session_id="s", input={"sleep": 0.3})
        second = await post(http, server.base, session_id="s", input={})
        await until_status(http, server.base, second, "completed")
        await until_status(http, server.base, first, "completed")


async def test_work_past_the_free_slots_all_runs(tmp_path: Path) -> None:
    async with (
        served(tmp_path, worker={"concurrency": 1}, timers=NO_PASS) as server,
        aiohttp.ClientSession() as http,
    ):
        first = await post(http, server.base, input={})  # its refill finds nothing: no doubt
        await until_status(http, server.base, first, "completed")
        ids = [await post(http, server.base, input={"sleep": 0.05}) for _ in range(6)]
        for invocation_id in ids:
            await until_status(http, server.base, invocation_id, "completed")


async def test_a_session_parked_behind_a_wait_goes_on_after_it(tmp_path: Path) -> None:
    """The refill after the lone run finds nothing with nothing running (the doubt is cleared);
    the session's next still runs when the parked one ends (its own token)."""
    async with served(tmp_path, timers=NO_PASS) as server, aiohttp.ClientSession() as http:
        parked = await post(http, server.base, session_id="s", input={"wait": "go"})
        await until_status(http, server.base, parked, "waiting")
        behind = await post(http, server.base, session_id="s", input={})
        lone = await post(http, server.base, input={})  # a refill that finds nothing meanwhile
        await until_status(http, server.base, lone, "completed")
        answer = {"wait": "go", "value": 1}
        async with http.post(f"{server.base}/api/invocations/{parked}/input", json=answer) as r:
            assert r.status == 200, await r.text()
        await until_status(http, server.base, parked, "completed")
        await until_status(http, server.base, behind, "completed")
