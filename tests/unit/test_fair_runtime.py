"""A worker node's side of fair claiming, on the embedded store (``tether dev``'s semantics):
messages are tokens, a token with nothing claimable is dropped, and no work is lost for it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tether import AgentApp, InvocationContext
from tether.services import Services
from tether.settings import load_settings
from tether.status import Status
from tether.store.schema import NewInvocation
from tether.worker.wiring import embedded_node


class Gauge:
    """Attempts running at once, per tenant, as the handler sees them."""

    def __init__(self) -> None:
        self.now: dict[str, int] = {}
        self.most: dict[str, int] = {}

    def app(self) -> AgentApp:
        app = AgentApp()

        @app.invoke
        async def invoke(input: Any, ctx: InvocationContext) -> Any:
            tenant = input["tenant"]
            self.now[tenant] = self.now.get(tenant, 0) + 1
            self.most[tenant] = max(self.most.get(tenant, 0), self.now[tenant])
            try:
                await asyncio.sleep(0.02)
            finally:
                self.now[tenant] -= 1
            return {"ok": True}

        return app


@pytest.fixture
def gauge() -> Gauge:
    return Gauge()


def node(tmp_path: Path, gauge: Gauge, claim_poll: float) -> Any:
    settings = load_settings(
        None,
        embedded_path=str(tmp_path / "t.db"),
        timers={"claim_poll": claim_poll, "shutdown_grace": 0.2},
        worker={"concurrency": 4},
    )
    return embedded_node(settings, gauge.app())


@pytest.fixture
async def polled(tmp_path: Path, gauge: Gauge) -> AsyncIterator[Services]:
    async with node(tmp_path, gauge, claim_poll=0.05) as services:
        yield services


@pytest.fixture
async def unpolled(tmp_path: Path, gauge: Gauge) -> AsyncIterator[Services]:
    """No periodic pass within any test's time: only tokens and freed slots claim."""
    async with node(tmp_path, gauge, claim_poll=3600) as services:
        yield services


async def submit(services: Services, tenant: str, count: int, *, send: bool = True) -> list[str]:
    ids = []
    for _ in range(count):
        invocation_id = str(uuid.uuid4())
        await services.store.accept(
            NewInvocation(invocation_id, "ann", None, {"tenant": tenant}, "h", tenant=tenant)
        )
        ids.append(invocation_id)
    if send:
        await services.queue.send(ids)
    return ids


async def all_completed(services: Services, ids: Sequence[str], within: float = 20) -> None:
    deadline = time.monotonic() + within
    while True:
        states = [await services.store.get(i) for i in ids]
        if all(s is not None and s.status is Status.COMPLETED for s in states):
            return
        assert time.monotonic() < deadline, [s.status for s in states if s is not None]
        await asyncio.sleep(0.02)


async def test_work_whose_tokens_were_dropped_at_its_cap_runs_as_slots_free(
    unpolled: Services, gauge: Gauge
) -> None:
    await unpolled.store.tenants.set("a", {"max_active": 1})
    ids = await submit(unpolled, "a", 6)  # six tokens: one claims, the other five find a capped
    await all_completed(unpolled, ids)
    assert gauge.most == {"a": 1}


async def test_a_cap_raised_at_run_time_starts_queued_work_without_a_message(
    polled: Services, gauge: Gauge
) -> None:
    await polled.store.tenants.set("a", {"max_active": 0})
    ids = await submit(polled, "a", 3)  # every token finds nothing it may claim: dropped
    for invocation_id in ids:
        waiting = await polled.store.get(invocation_id)
        assert waiting is not None and waiting.status is Status.QUEUED
    await polled.store.tenants.set("a", {"max_active": 2})
    await all_completed(polled, ids)
    assert gauge.most["a"] <= 2


async def test_a_capped_tenant_does_not_hold_slots_other_tenants_need(
    unpolled: Services, gauge: Gauge
) -> None:
    await unpolled.store.tenants.set("a", {"max_active": 2})
    flood = await submit(unpolled, "a", 30)
    others = await submit(unpolled, "b", 8)
    await all_completed(unpolled, [*flood, *others])
    assert gauge.most["a"] <= 2
    assert gauge.most["b"] >= 1


async def test_tokens_beyond_the_free_slots_are_dropped_and_the_work_still_runs(
    unpolled: Services, gauge: Gauge
) -> None:
    ids = await submit(unpolled, "a", 12, send=False)
    await unpolled.queue.send(ids[:2])  # two tokens for twelve: freed slots claim the rest
    await all_completed(unpolled, ids)
