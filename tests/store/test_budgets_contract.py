"""Token and cost budgets on both stores, with the agent runtime and real model adapters talking
HTTP to a local fake model server: each adapter's usage format, per-invocation and per-tenant
budgets, overshoot by at most one call, parking until the budget allows, and no double count
on replay."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from databricks.sdk.config import Config

from tests.agents.agent_server import wait_for
from tests.agents.conftest import FakeModelServer, FakeSink, chat_chunk, sse
from tether import AgentApp, BudgetExceeded, InvocationContext, ModelUsage
from tether.agents import ScriptedModel, build_agent_app, create_agent, tool
from tether.agents.adapters import SupervisorAdapter, from_model_serving, openai_compatible
from tether.agents.adapters.scripted import ScriptedTurn
from tether.agents.registry import AgentRegistry
from tether.agents.types import ModelAdapter
from tether.budgets import StoreMeter, wait_name
from tether.durable import Suspend
from tether.jsonvalue import dumps
from tether.store.errors import StoreUnavailable
from tether.store.journal import Resolution
from tether.store.schema import NewInvocation
from tether.store.store import Store
from tether.store.usage import Usage
from tether.usage import UsageTotals

pytestmark = pytest.mark.timeout(60)
PARKED = "parked"


@pytest.fixture
async def model_server() -> AsyncIterator[FakeModelServer]:
    fake = FakeModelServer()
    await fake.start()
    yield fake
    await fake.stop()


@tool
def tick() -> str:
    """Ticks."""
    return "tick"


def app_of(model: ModelAdapter, **agent: Any) -> AgentApp:
    looper = create_agent("looper", "Loop.", model=model, tools=[tick], default=True, **agent)
    return build_agent_app(AgentRegistry.of([looper]))


def looping_model(turns: int = 20, usage: tuple[int, int] = (100, 20)) -> ScriptedModel:
    """Calls ``tick`` on every turn, reporting ``usage`` each time."""
    return ScriptedModel([ScriptedTurn(tool_calls=(("tick", {}),), usage=usage)] * turns)


async def run(app: AgentApp, store: Store, sink: FakeSink, invocation: str, number: int = 1) -> Any:
    """One attempt of ``invocation`` (tenant ``acme``), metered on the store: its output, or
    :data:`PARKED`."""
    ctx = InvocationContext(
        invocation_id=invocation,
        session_id=None,
        attempt=number,
        sink=sink,
        recorded=sink.recorded(),
        tenant="acme",
        usage=StoreMeter(store.usage, invocation, "acme"),
    )
    handler = app.handler_for(number > 1)
    assert handler is not None
    try:
        return await handler("go", ctx)
    except Suspend:
        return PARKED


async def accepted(store: Store, *names: str) -> None:
    for name in names:
        await store.accept(NewInvocation(name, "ann", None, "go", "h", tenant="acme"))


async def usage_of(store: Store, invocation: str) -> UsageTotals | None:
    row = await store.get(invocation)
    assert row is not None
    return row.usage


# -- each adapter's usage format ------------------------------------------------------------

USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


def openai_stream(server: FakeModelServer) -> None:
    """OpenAI-compatible, streamed, usage in the last chunk (``include_usage``)."""
    server.reply(
        chat_chunk("Hello"),
        f"data: {dumps({'choices': [], 'usage': USAGE})}\n\n",
        "data: [DONE]\n\n",
    )


def openai_whole(server: FakeModelServer) -> None:
    """OpenAI-compatible, one JSON completion instead of a stream."""
    body = {"choices": [{"message": {"role": "assistant", "content": "Hello"}}], "usage": USAGE}
    server.reply(json.dumps(body, indent=2))  # over several lines, as some servers send it


def serving_stream(server: FakeModelServer) -> None:
    """Databricks Model Serving: the usage rides on the stream's chunks."""
    partial = {"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101}
    server.reply(
        f"data: {dumps({'choices': [{'delta': {'content': 'Hel'}}], 'usage': partial})}\n\n",
        f"data: {dumps({'choices': [{'delta': {'content': 'lo'}}], 'usage': USAGE})}\n\n",
        "data: [DONE]\n\n",
    )


def supervisor_stream(server: FakeModelServer) -> None:
    """The Supervisor API (Responses): the usage in ``response.completed``."""
    usage = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}
    server.reply(
        sse("response.output_text.delta", {"item_id": "m1", "delta": "Hello"}),
        sse("response.completed", {"response": {"status": "completed", "usage": usage}}),
    )


def silent_stream(server: FakeModelServer) -> None:
    """A model that reports no usage at all."""
    server.reply(chat_chunk("Hello"), "data: [DONE]\n\n")


FORMATS = {
    "openai-stream": (openai_stream, "openai"),
    "openai-whole": (openai_whole, "openai"),
    "serving": (serving_stream, "serving"),
    "supervisor": (supervisor_stream, "supervisor"),
    "none": (silent_stream, "openai"),
}


async def adapter_for(kind: str, server: FakeModelServer) -> ModelAdapter:
    if kind == "openai":
        return openai_compatible("gpt-x", base_url=server.url, api_key="k")
    config = await asyncio.to_thread(Config, host=server.url, token="x")
    if kind == "serving":
        return from_model_serving("ep", config=config)
    return SupervisorAdapter("sup", config=config)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
async def test_each_adapters_usage_is_counted_and_spends_the_tenants_budget(
    store: Store, model_server: FakeModelServer, fmt: str
) -> None:
    reply, kind = FORMATS[fmt]
    app = app_of(await adapter_for(kind, model_server))
    await store.tenants.set("acme", {"tokens_per_period": 1})
    await accepted(store, "inv-1", "inv-2")
    reply(model_server)
    result = await run(app, store, FakeSink(), "inv-1")
    assert result["text"] == "Hello"
    usage = await usage_of(store, "inv-1")
    assert usage is not None and usage.model_calls == 1
    if fmt == "none":  # estimated: a token per 4 characters, rounded up
        prompt = sum(len(m["content"]) for m in model_server.requests[0].body["messages"])
        assert usage.estimated and usage.output_tokens == 2  # "Hello"
        assert usage.input_tokens >= -(-prompt // 4)  # and the tool definitions
    else:
        assert (usage.input_tokens, usage.output_tokens, usage.estimated) == (100, 20, False)
    if fmt == "openai-stream":
        assert model_server.requests[0].body["stream_options"] == {"include_usage": True}
    # the tenant's period budget (1 token) is spent: the next run calls no model
    with pytest.raises(BudgetExceeded) as raised:
        await run(app, store, FakeSink(), "inv-2")
    assert raised.value.budget == "tokens_per_period"
    assert len(model_server.requests) == 1
    assert await usage_of(store, "inv-2") is None


# -- per invocation, per period, overshoot -------------------------------------------------


async def test_an_invocation_budget_stops_the_loop_overshooting_by_at_most_one_call(
    store: Store,
) -> None:
    model = looping_model()
    app = app_of(model)
    await store.tenants.set("acme", {"tokens_per_invocation": 300})
    await accepted(store, "inv-1", "inv-2")
    with pytest.raises(BudgetExceeded) as raised:
        await run(app, store, FakeSink(), "inv-1")
    assert raised.value.budget == "tokens_per_invocation"
    usage = await usage_of(store, "inv-1")
    assert usage == UsageTotals(300, 60, 0.0, False, 3)  # 120, 240 < 300: a third call started
    assert len(model.requests) == 3
    assert usage.total_tokens - 120 < 300  # over only by the call that crossed the line
    # the budget is per invocation: another one of the tenant runs
    assert await run(app_of(ScriptedModel.of("done")), store, FakeSink(), "inv-2") is not None


async def test_a_cost_budget_counts_the_agents_price(store: Store) -> None:
    model = looping_model()
    app = app_of(model, price={"input": 1000.0, "output": 5000.0})  # per million tokens
    await store.tenants.set("acme", {"cost_per_period": 0.4})
    await accepted(store, "inv-1")
    with pytest.raises(BudgetExceeded) as raised:
        await run(app, store, FakeSink(), "inv-1")
    assert raised.value.budget == "cost_per_period"
    usage = await usage_of(store, "inv-1")
    assert usage is not None and usage.model_calls == 2  # 0.2 a call: 0.2 < 0.4, then 0.4
    assert usage.cost == pytest.approx(0.4)
    [tenant] = await store.usage.tenants(["acme"])
    assert tenant.period_cost == pytest.approx(0.4) and tenant.period_tokens == 240


async def test_the_period_budget_is_shared_by_every_run_of_the_tenant(store: Store) -> None:
    await store.tenants.set("acme", {"tokens_per_period": 200})
    await accepted(store, "inv-1", "inv-2")
    one_call = app_of(ScriptedModel([ScriptedTurn("done", usage=(100, 20))]))
    await run(one_call, store, FakeSink(), "inv-1")
    model = looping_model()
    with pytest.raises(BudgetExceeded):
        await run(app_of(model), store, FakeSink(), "inv-2")
    assert len(model.requests) == 1  # 120 < 200: one call; then 240 ≥ 200
    [tenant] = await store.usage.tenants(["acme"])
    assert tenant.period_tokens == 240


# -- park ---------------------------------------------------------------------------------


async def test_a_parked_run_resumes_when_the_limit_is_raised_and_its_wait_resolved(
    store: Store,
) -> None:
    model = looping_model(turns=2)
    app = app_of(model)
    await store.tenants.set("acme", {"tokens_per_invocation": 100, "on_budget": "park"})
    await accepted(store, "inv-1")
    sink = FakeSink()
    assert await run(app, store, sink, "inv-1") == PARKED
    [[wait]] = sink.parks
    assert wait.name == wait_name("looper#t1", 0) and wait.details["budget"] == (
        "tokens_per_invocation"
    )
    assert wait.wake_in is not None and wait.wake_in > 0  # rechecked when the period ends
    assert len(model.requests) == 1
    # an attempt that wakes up with the budget still spent parks again, on the next wait
    sink.resolve(wait.name, None, Resolution.TIMEOUT)
    assert await run(app, store, sink, "inv-1", 2) == PARKED
    assert sink.parks[-1][0].name == wait_name("looper#t1", 1)
    await store.tenants.set("acme", {"tokens_per_invocation": 1000})
    sink.resolve(sink.parks[-1][0].name, {"go": True})
    result = await run(app, store, sink, "inv-1", 3)
    assert result["text"] == ""  # past the script's end: an empty answer
    assert len(model.requests) == 3  # t0, then t1 and t2 only once the budget allowed
    usage = await usage_of(store, "inv-1")
    assert usage is not None and usage.model_calls == 3


async def test_a_parked_run_resumes_when_the_next_period_starts(store: Store) -> None:
    app = app_of(ScriptedModel([ScriptedTurn("done", usage=(100, 20))]))
    await store.tenants.set(
        "acme", {"tokens_per_period": 100, "on_budget": "park", "budget_period": 1.0}
    )
    await accepted(store, "inv-0", "inv-1")
    await store.usage.add("inv-0", "acme", 1.0, ModelUsage(100, 0))
    sink = FakeSink()
    outcome = await run(app, store, sink, "inv-1")
    if outcome != PARKED:  # the period ended between the add and the check: nothing to test
        pytest.skip("the budget period rolled over before the check")
    parked_in = (await store.usage.state("inv-1", "acme")).period_start

    async def next_period() -> bool:  # the database clock is in the next period
        return (await store.usage.state("inv-1", "acme")).period_start != parked_in

    await wait_for(next_period)
    sink.resolve(sink.parks[0][0].name, None, Resolution.TIMEOUT)  # as the wait's timer does
    result = await run(app, store, sink, "inv-1", 2)
    assert result["text"] == "done"


# -- replay -------------------------------------------------------------------------------


async def test_replayed_model_calls_are_not_counted_again_but_repeated_ones_are(
    store: Store,
) -> None:
    model = looping_model(turns=3)
    app = app_of(model)
    await accepted(store, "inv-1")
    sink = FakeSink(crash_after_steps=3)  # t0, t0.c0, t1: dies right after the second turn
    task = asyncio.create_task(run(app, store, sink, "inv-1"))
    await sink.crashed.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    sink.crash_after_steps = None
    counted = await usage_of(store, "inv-1")
    assert counted is not None and counted.model_calls == 2
    await run(app, store, sink, "inv-1", 2)  # replays t0 and t1, then asks t2 and t3
    usage = await usage_of(store, "inv-1")
    assert usage is not None and usage.model_calls == len(model.requests) == 4


class DiesBeforeRecording(FakeSink):
    """A worker that dies after a model call was made and counted, before its step is stored."""

    def __init__(self, step: str) -> None:
        super().__init__()
        self.step = step

    async def record_step(self, name: str, result: Any, error_type: str | None) -> None:
        if name == self.step and not self.crashed.is_set():
            self.crashed.set()
            await asyncio.Event().wait()
        await super().record_step(name, result, error_type)


async def test_a_call_made_again_after_a_crash_is_new_spending(store: Store) -> None:
    model = looping_model(turns=1)
    app = app_of(model)
    await accepted(store, "inv-1")
    sink = DiesBeforeRecording("looper#t0")
    task = asyncio.create_task(run(app, store, sink, "inv-1"))
    await sink.crashed.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await run(app, store, sink, "inv-1", 2)  # asks t0 again (nothing recorded), then t1
    usage = await usage_of(store, "inv-1")
    assert len(model.requests) == 3
    assert usage is not None and usage.model_calls == 3


class Unavailable(Usage):
    """The store's usage table, while the database is down for writes."""

    async def add(self, *args: Any, **kwargs: Any) -> float:
        raise StoreUnavailable("the database is down")


async def test_a_usage_write_the_database_refuses_loses_that_count_not_the_turn(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    model = looping_model(turns=1)
    app = app_of(model)
    await accepted(store, "inv-1")
    sink = FakeSink()
    ctx_usage = Unavailable(store.db, store.tenants)
    ctx = InvocationContext(
        invocation_id="inv-1",
        session_id=None,
        attempt=1,
        sink=sink,
        recorded=sink.recorded(),
        tenant="acme",
        usage=StoreMeter(ctx_usage, "inv-1", "acme"),
    )
    handler = app.handler_for(False)
    assert handler is not None
    with caplog.at_level("WARNING"):
        result = await handler("go", ctx)
    assert result["text"] == ""  # the run finished: the turns were recorded, not failed
    assert all(record.error_type is None for record in sink.steps.values())
    assert "inv-1: the usage of a model call (120 tokens) was not recorded" in caplog.text
    assert await usage_of(store, "inv-1") is None
