"""When a freed slot claims at once (``tether.worker.refills``): the rule alone, then
``tether dev`` with its periodic claim pass an hour away, so that only a freed slot's claim can
start work whose token came when it could not run."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest

from tests.inprocess import served
from tests.unit.test_gateway_embedded import body
from tether import AgentApp, InvocationContext
from tether.services import Services
from tether.settings import load_settings
from tether.status import Status
from tether.store.schema import Claim, NewInvocation
from tether.store.store import Store
from tether.worker import refills
from tether.worker.newcomers import NewcomerClaims
from tether.worker.refills import FreedSlots
from tether.worker.slots import Slots
from tether.worker.wiring import embedded_node, sole_server

NO_PASS = {"claim_poll": 3600.0}


async def started_nothing() -> bool | None:
    return False


def rule(busy: int = 1, alone: bool = True, none_queued: bool = True) -> FreedSlots:
    freed = FreedSlots(lambda: busy, started_nothing)
    freed.every_token_comes_here(lambda: alone, lambda: none_queued)
    return freed


def recording(busy: int = 1) -> tuple[FreedSlots, list[str]]:
    """``tether dev``'s rule, whose freed slots' claims (which start nothing) are recorded."""
    claims: list[str] = []

    async def claim() -> bool:
        claims.append("again")
        return False

    freed = FreedSlots(lambda: busy, claim)
    freed.every_token_comes_here(lambda: True, lambda: True)
    return freed, claims


async def nothing() -> Claim | None:
    return None


async def claim_nothing(freed: FreedSlots, *, token: str = "") -> None:
    """A claim that finds nothing: a freed slot's, or ``token``'s (its invocation id)."""
    assert await freed.claimed(nothing(), token) is None


async def test_where_other_processes_take_tokens_a_freed_slot_always_claims() -> None:
    for freed in (FreedSlots(lambda: 1, started_nothing), rule(alone=False)):
        await claim_nothing(freed)
        assert freed.claims()


async def test_the_sole_process_claims_until_a_claim_alone_finds_nothing() -> None:
    freed = rule()
    assert freed.claims()  # at start: work may be queued from before
    await claim_nothing(freed)
    assert not freed.claims()
    await claim_nothing(freed, token="a")  # its invocation waits: it is owed
    assert freed.claims()


async def test_a_claim_that_finds_nothing_beside_a_cap_holder_clears_no_doubt() -> None:
    freed = rule(busy=2)  # another attempt runs (or is left to recovery): it may hold a cap
    await claim_nothing(freed)
    assert freed.claims()


async def test_a_claim_that_finds_nothing_while_work_is_queued_clears_no_doubt() -> None:
    """The queued work waits for something no claim can start yet (a paused tenant, a session's
    turn, a backoff): once it can run, it may take another tenant's token."""
    freed = rule(none_queued=False)
    await claim_nothing(freed)
    assert freed.claims()


async def test_a_slot_whose_claim_found_nothing_claims_again_for_a_token_it_kept_out() -> None:
    """tether dev's tokens do not wait for a slot: one that found none while a claim held it
    (a freed slot's, the pass's, another token's) has its work claimed as soon as that claim
    gives the slot back, not at the next pass."""
    freed, claims = recording(busy=2)
    gate = asyncio.Event()

    async def slow_nothing() -> Claim | None:
        await gate.wait()
        return None

    refills = [asyncio.create_task(freed.claimed(slow_nothing(), "")) for _ in range(3)]
    await asyncio.sleep(0)
    freed.token_found_no_slot("a")  # one token kept out by three claims: one claims again
    gate.set()
    assert await asyncio.gather(*refills) == [None] * 3
    await freed.settled()
    assert claims == ["again"]
    await claim_nothing(freed)  # no token kept out meanwhile: no claim again
    await freed.settled()
    assert claims == ["again"]
    gate.clear()
    token = asyncio.create_task(freed.claimed(slow_nothing(), "b"))
    await asyncio.sleep(0)
    freed.token_found_no_slot("c")  # kept out by another token's claim: the same
    gate.set()
    assert await token is None
    await freed.settled()
    assert claims == ["again", "again"]


class NewcomersBeside:
    """Three slots, one reserved; a newcomers' claim that holds what it took until ``gate``
    opens, then finds nothing (this is its store); ``tether dev``'s freed-slot rule, whose
    claims again are recorded in ``claims``."""

    def __init__(self, busy: int) -> None:
        self.claims: list[str] = []
        self.gate = asyncio.Event()
        self.freed = FreedSlots(lambda: busy, self._claim_again)
        self.freed.every_token_comes_here(lambda: True, lambda: True)
        self.slots = Slots(3, reserve=1)
        self.newcomers = NewcomerClaims(
            self.slots,
            cast(Store, self),
            "w",
            lambda claim: None,
            lambda: (),
            self.freed,
        )

    async def _claim_again(self) -> bool:
        self.claims.append("again")
        return False

    async def claim_next(self, count: int, worker: str, **kwargs: Any) -> list[Claim]:
        await self.gate.wait()
        return []

    async def found_nothing(self) -> None:
        """The newcomers' claim ends, finding nothing; wait for what it set off."""
        self.gate.set()
        await self.newcomers.settled()
        await self.freed.settled()


async def test_slots_a_newcomers_claim_gives_back_claim_again_for_tokens_it_kept_out() -> None:
    """The reserved slots' claim may hold unreserved slots too; a token that found none
    meanwhile has its work claimed when they are given back."""
    beside = NewcomersBeside(busy=1)
    beside.newcomers.want(3)  # takes every slot, the unreserved ones included
    await asyncio.sleep(0)
    assert beside.slots.free == 0 and not beside.slots.try_take()
    beside.freed.token_found_no_slot("a")
    await beside.found_nothing()
    assert beside.slots.free == 3
    assert beside.claims == ["again"]  # once for the one token kept out, not once per slot


async def test_a_reserved_slot_given_back_leaves_the_kept_out_token_to_the_claim_that_held_it() -> (
    None
):
    """Only an unreserved slot can have kept a token out: the reserved slot a newcomers' claim
    gives back does not use up the claim again that the slot holding the token's way owes."""
    beside = NewcomersBeside(busy=2)
    slots, freed = beside.slots, beside.freed
    assert slots.try_take() and slots.try_take()  # both unreserved slots: a refill, a token
    beside.newcomers.want(1)  # only the reserved slot is left: it takes that one
    await asyncio.sleep(0)
    assert slots.free == 0
    freed.token_found_no_slot("a")
    await beside.found_nothing()
    assert beside.claims == []  # the reserved slot came back: no token could have taken it
    slots.give()  # the refill that held an unreserved slot finds nothing, gives it back
    await claim_nothing(freed)
    await freed.settled()
    assert beside.claims == ["again"]


async def test_a_token_that_started_nothing_or_failed_makes_freed_slots_claim() -> None:
    freed = rule()
    await claim_nothing(freed)
    await claim_nothing(freed, token="a")
    assert freed.claims()
    await claim_nothing(freed)

    async def broken() -> Claim | None:
        raise RuntimeError("database gone")

    with pytest.raises(RuntimeError):
        await freed.claimed(broken(), "b")
    assert freed.claims()


async def test_a_token_unserved_during_a_claim_keeps_the_doubt() -> None:
    freed = rule()
    gate = asyncio.Event()

    async def slow_nothing() -> Claim | None:
        await gate.wait()
        return None

    refill = asyncio.create_task(freed.claimed(slow_nothing(), ""))
    await asyncio.sleep(0)
    freed.token_found_no_slot("a")  # while the refill's claim ran
    gate.set()
    assert await refill is None
    assert freed.claims()


def won(invocation_id: str) -> Claim:
    return Claim(invocation_id, 1, {}, None, None, 1)


async def claim_won(freed: FreedSlots, invocation_id: str, *, token: str = "") -> None:
    async def claim() -> Claim | None:
        return won(invocation_id)

    assert await freed.claimed(claim(), token) is not None


async def test_a_token_whose_claim_started_other_work_leaves_its_own_to_a_freed_slot() -> None:
    """A token claims whatever runs next: its own invocation is owed until a claim starts it."""
    freed = rule()
    await claim_nothing(freed)
    await claim_won(freed, "older", token="a")
    assert freed.claims()
    await claim_won(freed, "a")  # a freed slot's claim started it
    assert not freed.claims()


async def test_a_token_that_comes_after_its_invocation_started_owes_nothing() -> None:
    freed = rule()
    await claim_nothing(freed)
    await claim_won(freed, "a", token="b")  # b's token took a before a's token came
    assert freed.claims()  # b is owed
    await claim_nothing(freed, token="a")
    assert freed.claims()
    await claim_won(freed, "b")
    assert not freed.claims()


async def test_a_new_token_for_an_invocation_started_before_owes_it_again() -> None:
    """A parked run's resume (or a replacement) sends its invocation another token."""
    freed = rule()
    await claim_nothing(freed)
    await claim_won(freed, "a", token="a")
    assert not freed.claims()
    await claim_won(freed, "b", token="a")  # the resume's token took other work first
    assert freed.claims()


async def test_a_token_coming_past_the_window_after_its_start_owes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    freed = rule()
    await claim_nothing(freed)
    await claim_won(freed, "a", token="b")
    await claim_won(freed, "b")  # a started before its token came
    monkeypatch.setattr(refills, "LATE_TOKEN_WINDOW", -1.0)  # it comes too late to be that one
    await claim_won(freed, "c", token="a")
    assert freed.claims()


async def test_while_tokens_claims_stand_for_what_is_owed_a_freed_slot_waits_for_them() -> None:
    """Under a burst each token's claim starts one invocation: a freed slot that claimed too
    would find nothing half the time. If a token's claim leaves its work behind, a slot freed
    meanwhile claims then."""
    freed, claims = recording()
    await claim_nothing(freed)
    assert not freed.claims()
    gates = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def slow(invocation_id: str, result: Claim | None) -> Claim | None:
        await gates[invocation_id].wait()
        return result

    starts_a = asyncio.create_task(freed.claimed(slow("a", won("a")), "a"))
    leaves_b = asyncio.create_task(freed.claimed(slow("b", None), "b"))  # b waits for a cap
    await asyncio.sleep(0)
    assert not freed.claims()  # two owed, two tokens' claims in flight
    freed.slot_freed()
    freed.slot_freed()
    gates["a"].set()
    await starts_a
    await freed.settled()
    assert claims == []
    gates["b"].set()
    assert await leaves_b is None
    await freed.settled()
    assert claims == ["again"]  # one claim for b, not one per slot freed
    assert freed.claims()  # b is still owed: the next freed slot claims too


async def test_a_token_kept_out_claims_again_only_while_its_work_is_owed() -> None:
    """Tokens dropped behind running attempts (not claims) stayed counted; once their work had
    started, each empty claim set off another, one per token dropped."""
    freed, claims = recording()
    await claim_nothing(freed)
    freed.token_found_no_slot("a")
    freed.token_found_no_slot("b")
    await claim_won(freed, "a")
    await claim_won(freed, "b")
    await claim_won(freed, "c")  # freed slots started all three
    await claim_nothing(freed, token="c")  # c's token came late: an empty claim
    await claim_nothing(freed)
    await freed.settled()
    assert claims == []


async def test_a_token_kept_out_behind_a_claim_in_flight_is_claimed_for_when_that_ends() -> None:
    """A's token found no slot; the claim holding it found nothing (it read before A came) while
    B's token's claim, which owes nothing, seemed to stand for A: when that ends empty, A is
    claimed for at once, not at the next pass."""
    freed, claims = recording()
    await claim_nothing(freed)
    await claim_won(freed, "b")  # b started before its token came
    gates = {"refill": asyncio.Event(), "b": asyncio.Event()}

    async def slow_nothing(gate: str) -> Claim | None:
        await gates[gate].wait()
        return None

    refill = asyncio.create_task(freed.claimed(slow_nothing("refill"), ""))
    late = asyncio.create_task(freed.claimed(slow_nothing("b"), "b"))
    await asyncio.sleep(0)
    freed.token_found_no_slot("a")
    gates["refill"].set()  # the claim that held the slot gives it back
    assert await refill is None
    await freed.settled()
    assert claims == []
    gates["b"].set()
    assert await late is None
    await freed.settled()
    assert claims == ["again"]


async def test_past_the_owed_it_keeps_freed_slots_claim_until_one_finds_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(refills, "OWED_REMEMBERED", 2)
    freed = rule()
    await claim_nothing(freed)
    for invocation_id in "abc":
        await claim_won(freed, "x" + invocation_id, token=invocation_id)
    assert freed.claims()
    await claim_nothing(freed)  # alone, with nothing queued: the backlog is gone
    assert not freed.claims()


async def test_a_freed_slots_claim_that_found_no_slot_leaves_it_to_a_slot_given_back() -> None:
    """A reserved slots' claim may hold the unreserved slot a freed slot's claim wanted."""
    answers: list[bool | None] = [None, False]

    async def claim() -> bool | None:
        return answers.pop(0)

    freed = FreedSlots(lambda: 1, claim)
    freed.every_token_comes_here(lambda: True, lambda: True)
    await claim_nothing(freed)
    await claim_won(freed, "older", token="a")  # a is owed
    freed.slot_freed()
    await freed.settled()
    assert answers == [False]  # no slot was free
    freed.slot_given_back()
    await freed.settled()
    assert answers == []


async def test_a_second_server_makes_freed_slots_always_claim() -> None:
    alone = True
    freed = FreedSlots(lambda: 1, started_nothing)
    freed.every_token_comes_here(lambda: alone, lambda: True)
    await claim_nothing(freed)
    assert not freed.claims()
    alone = False
    assert freed.claims()
    alone = True  # a signed lock file stays signed; the rule does not come back either
    assert freed.claims()


def sleeper() -> AgentApp:
    app = AgentApp()

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        await asyncio.sleep(input.get("sleep", 0))
        return {}

    return app


async def submit(services: Services, tenant: str, **input: Any) -> str:
    invocation_id = str(uuid.uuid4())
    await services.store.accept(
        NewInvocation(invocation_id, "ann", None, input, "h", tenant=tenant)
    )
    await services.queue.send([invocation_id])
    return invocation_id


async def until(services: Services, invocation_id: str, status: Status) -> None:
    for _ in range(300):
        row = await services.store.get(invocation_id)
        if row is not None and row.status is status:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{invocation_id} never became {status.value}")


async def test_work_that_took_a_capped_tenants_token_leaves_a_freed_slot_to_start_it(
    tmp_path: Path,
) -> None:
    """A paused tenant's queued work keeps freed slots claiming. Unpaused, it takes the token
    of work whose tenant is at its cap (a token claims what runs next); when the cap holder
    ends, its freed slot starts that work: nothing else would, with the pass an hour away."""
    settings = load_settings(
        None,
        embedded_path=str(tmp_path / "t.db"),
        timers={**NO_PASS, "shutdown_grace": 0.2},
        worker={"concurrency": 4},
    )
    async with embedded_node(settings, sleeper()) as services:
        tenants = services.store.tenants
        await until(services, await submit(services, "z"), Status.COMPLETED)
        await tenants.set("p", {"max_active": 0})  # paused
        paused = await submit(services, "p")
        await until(services, await submit(services, "z"), Status.COMPLETED)  # a lone refill
        await tenants.set("c", {"max_active": 1})
        holder = await submit(services, "c", sleep=0.3)
        await until(services, holder, Status.ACTIVE)
        await tenants.set("p", {"max_active": None})
        capped = await submit(services, "c")  # its token starts the unpaused work
        await until(services, paused, Status.COMPLETED)
        await until(services, holder, Status.COMPLETED)
        await until(services, capped, Status.COMPLETED)


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
    """The refill after the lone run finds nothing it can start (the session's next waits for
    its turn); the session's next runs when the parked one ends (its own token)."""
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


def test_a_second_server_on_the_file_signs_the_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "t.db")
    with sole_server(path) as first:
        assert first is not None and first()
        with sole_server(path) as second:
            assert second is None
        assert not first()
    with sole_server(path) as again:  # the next sole server starts unsigned
        assert again is not None and again()
    with sole_server(":memory:") as throwaway:  # a new file of its own: always alone
        assert throwaway is not None and throwaway()


def test_a_server_started_while_a_second_one_still_serves_is_not_alone(tmp_path: Path) -> None:
    """The lock's holder dies (kill -9) while the second `tether dev` on the file runs on. A third
    started then takes the free lock, but the second still serves: every attempt it runs is
    alive, so the third must not count itself alone (it would hand them back and replace them)."""
    path = str(tmp_path / "t.db")
    with contextlib.ExitStack() as servers:
        first = contextlib.ExitStack()
        assert first.enter_context(sole_server(path)) is not None
        assert servers.enter_context(sole_server(path)) is None  # the second one
        first.close()  # the holder dies; the second serves on
        with sole_server(path) as third:
            assert third is None
    with sole_server(path) as alone:  # once the second is gone too, the next one is alone
        assert alone is not None and alone()


async def test_a_second_dev_on_the_file_makes_the_firsts_freed_slots_claim(tmp_path: Path) -> None:
    """P1 runs the only attempt the global cap allows; P2 accepts work whose token finds the
    cap full. When P1's attempt ends, P1's freed slot must claim it (P1 did not see the token)."""
    store = Store.embedded(str(tmp_path / "t.db"))
    await store.migrate()
    await store.tenants.set_global_max_active(1)
    await store.close()
    async with (
        served(tmp_path, timers=NO_PASS) as p1,
        served(tmp_path, timers=NO_PASS) as p2,
        aiohttp.ClientSession() as http,
    ):
        first = await post(http, p1.base, input={})
        await until_status(http, p1.base, first, "completed")  # P1's doubt is cleared
        long = await post(http, p1.base, input={"sleep": 0.5})
        await until_status(http, p1.base, long, "active")
        waiting = await post(http, p2.base, input={})
        await until_status(http, p1.base, waiting, "completed")
