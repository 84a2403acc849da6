"""Model usage as each API reports it, the estimate when none is reported, prices, and the
budget verdict (fast: no store)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from databricks.sdk.config import Config

from tests.agents.conftest import FakeModelServer, chat_chunk
from tests.agents.test_definitions import write_agent
from tether import ModelPrice, ModelUsage
from tether.agents import ScriptedModel, create_agent, load_agents_dir, run_agent
from tether.agents.adapters import from_ai_gateway, from_model_serving, openai_compatible
from tether.agents.adapters.chat_stream import ChatDeltaParser
from tether.agents.adapters.scripted import ScriptedTurn
from tether.agents.adapters.usage import chat_usage, responses_usage
from tether.agents.errors import DefinitionError
from tether.agents.types import AgentInput, user
from tether.budgets import judge
from tether.store.tenants import TenantLimits
from tether.store.usage import BudgetState
from tether.usage import UsageTotals, estimate, estimate_tokens


def test_chat_usage_reads_prompt_and_completion_tokens() -> None:
    report = {"usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}
    assert chat_usage(report) == ModelUsage(12, 3)
    assert chat_usage({"usage": {"total_tokens": 9}}) == ModelUsage(0, 9)  # only a total
    assert chat_usage({"usage": None}) is None
    assert chat_usage({"usage": {"prompt_tokens": "many", "completion_tokens": -1}}) is None
    assert chat_usage({"choices": []}) is None


def test_responses_usage_reads_input_and_output_tokens() -> None:
    usage = {"input_tokens": 40, "output_tokens": 2, "total_tokens": 42}
    assert responses_usage({"status": "completed", "usage": usage}) == ModelUsage(40, 2)
    assert responses_usage({"status": "completed"}) is None
    assert responses_usage(None) is None


def test_a_count_the_store_cannot_hold_is_no_count() -> None:
    bogus = {"prompt_tokens": 10**20, "completion_tokens": 1e30, "total_tokens": 2**70}
    assert chat_usage({"usage": bogus}) is None
    assert chat_usage({"usage": {**bogus, "prompt_tokens": 12}}) == ModelUsage(12, 0)
    assert responses_usage({"usage": {"input_tokens": 1e30, "output_tokens": 3}}) == ModelUsage(
        0, 3
    )


def test_the_last_reported_usage_of_a_stream_wins() -> None:
    parser = ChatDeltaParser()
    first = {"choices": [{"delta": {"content": "a"}}], "usage": {"prompt_tokens": 5}}
    last = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}}
    parser.feed_line(f"data: {json.dumps(first)}")
    parser.feed_line(f"data: {json.dumps(last)}")
    parser.feed_line("data: [DONE]")
    assert parser.usage == ModelUsage(5, 7) and parser.text == "a"
    assert parser.finish() == []  # a stream is never read again as a whole answer


def test_a_whole_answer_gives_its_text_tool_calls_and_usage() -> None:
    parser = ChatDeltaParser()
    answer = {
        "choices": [
            {
                "message": {
                    "content": "Looking",
                    "tool_calls": [
                        {"id": "c9", "function": {"name": "find", "arguments": '{"q": 1}'}}
                    ],
                }
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
    for line in json.dumps(answer, indent=2).splitlines():
        assert parser.feed_line(line) == []
    assert parser.finish() == [{"type": "message_delta", "content": "Looking"}]
    [call] = parser.tool_calls({})
    assert (call.id, call.name, call.args) == ("c9", "find", {"q": 1})
    assert parser.usage == ModelUsage(3, 4)


def test_the_estimate_is_a_token_per_four_characters_rounded_up() -> None:
    assert [estimate_tokens(n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]
    assert estimate(9, 3) == ModelUsage(3, 1, estimated=True)


def test_a_price_makes_the_cost_and_totals_remember_an_estimate() -> None:
    usage = ModelUsage(1_000, 200).priced(ModelPrice(3.0, 15.0))
    assert usage.cost == pytest.approx(0.006)
    totals = UsageTotals().plus(usage).plus(ModelUsage(1, 1, estimated=True))
    assert totals == UsageTotals(1_001, 201, usage.cost, True, 2)
    assert totals.to_json()["total_tokens"] == 1_202
    with pytest.raises(ValueError, match="finite"):
        ModelPrice(-1.0)


async def test_run_agent_adds_up_the_usage_estimated_when_a_model_reports_none() -> None:
    agent = create_agent("a", "Be brief.", model=ScriptedModel.of("twelve chars"))
    result = await run_agent(agent, "abcdefgh")
    assert result.usage.model_calls == 1 and result.usage.estimated
    assert result.usage.output_tokens == 3  # 12 characters
    assert result.usage.input_tokens == estimate_tokens(len("Be brief.") + len("abcdefgh"))


async def test_run_agent_counts_a_reported_usage_at_the_agents_price() -> None:
    script = [ScriptedTurn("ok", usage=(2_000, 1_000))]
    agent = create_agent("a", model=ScriptedModel(script), price={"input": 1.0, "output": 2.0})
    result = await run_agent(agent, "hi")
    assert result.usage.cost == pytest.approx(0.004)
    assert result.usage == UsageTotals(2_000, 1_000, result.usage.cost, False, 1)


@pytest.mark.parametrize("price", [{"input": -1}, {"in": 1}, "cheap", {"output": float("nan")}])
def test_a_bad_price_is_a_definition_error(price: Any) -> None:
    with pytest.raises(DefinitionError, match="price"):
        create_agent("a", model="scripted", script=["x"], price=price)


def test_a_scripted_usage_must_be_two_counts() -> None:
    with pytest.raises(DefinitionError, match="usage"):
        ScriptedTurn.parse({"text": "x", "usage": {"input_tokens": 1}})


def test_a_markdown_agent_takes_a_price(tmp_path: Path) -> None:
    write_agent(
        tmp_path, "priced", "---\nmodel: scripted\nscript: [hi]\nprice:\n  input: 3\n---\nx"
    )
    assert load_agents_dir(tmp_path).agents["priced"].price == ModelPrice(3.0, 0.0)


async def test_usage_is_asked_for_where_it_must_be_and_not_elsewhere(
    server: FakeModelServer, config: Config
) -> None:
    request = AgentInput([user("hi")])
    adapters = {
        "openai": openai_compatible("m", base_url=server.url, api_key="k"),
        "gateway": from_ai_gateway("m", config=config),
        "serving": from_model_serving("ep", config=config),
    }
    bodies = {name: adapter.body(request) for name, adapter in adapters.items()}
    assert bodies["openai"]["stream_options"] == {"include_usage": True}
    assert bodies["gateway"]["stream_options"] == {"include_usage": True}
    assert "stream_options" not in bodies["serving"]  # Model Serving reports it unasked
    server.reply(chat_chunk("x"), "data: [DONE]\n\n")
    outcome = [item async for item in adapters["serving"].turn(request)][-1]
    assert getattr(outcome, "usage", "missing") is None  # none reported: the loop estimates


def state(limits: TenantLimits, *, invocation: int = 0, period: int = 0, cost: float = 0.0) -> Any:
    return BudgetState(limits, 150.0, 100.0, period, cost, UsageTotals(invocation, 0))


def test_a_budget_is_spent_once_its_usage_reaches_the_limit() -> None:
    assert judge(state(TenantLimits(tokens_per_period=10), period=9)).budget is None
    spent = judge(state(TenantLimits(tokens_per_period=10, budget_period=100.0), period=10))
    assert (spent.budget, spent.park, spent.next_period_in) == ("tokens_per_period", False, 50.0)
    parked = judge(state(TenantLimits(tokens_per_invocation=0, on_budget="park")))
    assert (parked.budget, parked.park) == ("tokens_per_invocation", True)
    assert judge(state(TenantLimits(cost_per_period=0.5), cost=0.5)).budget == "cost_per_period"
    assert judge(state(TenantLimits(), invocation=10**9, period=10**9)).budget is None
