"""The chat-completions adapter over real HTTP (spec §2, cases D1–D12)."""

from __future__ import annotations

from typing import Any

import pytest
from databricks.sdk.config import Config

from tests.agents.conftest import FakeModelServer, chat_chunk
from tether.agents import ChatCompletionsAdapter, Message, from_model_serving, openai_compatible
from tether.agents.adapters.run import run_adapter
from tether.agents.errors import DefinitionError, ModelError
from tether.agents.types import AgentEvent, AgentInput, ToolDefinition, TurnOutcome
from tether.jsonvalue import dumps

HELLO = [Message("system", "Be terse."), Message("user", "Hello")]
QUERY = ToolDefinition("analytics.query", "Run SQL", {"type": "object", "properties": {}})


def tc(
    index: int,
    call_id: str | None = None,
    name: str | None = None,
    args: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "function": {}, **extra}
    if call_id is not None:
        out["id"] = call_id
    if name is not None:
        out["function"]["name"] = name
    if args is not None:
        out["function"]["arguments"] = args
    return out


async def run_all(
    adapter: ChatCompletionsAdapter, request: AgentInput, calls: list[tuple[str, Any]] | None = None
) -> list[AgentEvent]:
    async def execute(name: str, args: Any) -> Any:
        if calls is not None:
            calls.append((name, args))
        return "ok"

    return [e async for e in run_adapter(adapter, request, execute)]


async def one_turn(adapter: ChatCompletionsAdapter, request: AgentInput) -> list[Any]:
    return [item async for item in adapter.turn(request)]


async def test_text_deltas_stream_without_a_complete_status(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(chat_chunk("Hello"), chat_chunk(" world"), "data: [DONE]\n\n")
    adapter = from_model_serving("my-endpoint", config=config)
    events = await run_all(adapter, AgentInput(HELLO))
    assert events == [
        {"type": "status", "status": "running"},
        {"type": "message_delta", "content": "Hello"},
        {"type": "message_delta", "content": " world"},
    ]
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/serving-endpoints/my-endpoint/invocations")
    assert request.body["stream"] is True and request.body["max_tokens"] == 4096
    assert "tools" not in request.body and "model" not in request.body
    assert request.headers["Accept"] == "text/event-stream"


async def test_streamed_tool_calls_accumulate_and_map_names_back(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        chat_chunk(tool_calls=[tc(0, "call_1", "analytics__query", "")]),
        chat_chunk(tool_calls=[tc(0, args='{"query":')]),
        chat_chunk(tool_calls=[tc(0, args='"SELECT 1"}')]),
        "data: [DONE]\n\n",
    )
    server.reply(chat_chunk("Done."), "data: [DONE]\n\n")
    calls: list[tuple[str, Any]] = []
    events = await run_all(
        from_model_serving("ep", config=config), AgentInput(HELLO, tools=[QUERY]), calls
    )
    assert {
        "type": "tool_call",
        "callId": "call_1",
        "name": "analytics.query",
        "args": {"query": "SELECT 1"},
    } in events
    assert {"type": "tool_result", "callId": "call_1", "result": "ok"} in events
    assert calls == [("analytics.query", {"query": "SELECT 1"})]
    assert len(server.requests) == 2
    assert all(r.headers["Authorization"] == "Bearer x" for r in server.requests)
    first, second = server.requests
    assert first.body["tools"][0]["function"]["name"] == "analytics__query"
    assert second.body["messages"][2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "analytics__query", "arguments": '{"query":"SELECT 1"}'},
            }
        ],
    }
    assert second.body["messages"][3] == {"role": "tool", "content": "ok", "tool_call_id": "call_1"}


async def test_two_tools_with_one_wire_name_are_a_collision(config: Config) -> None:
    tools = [QUERY, ToolDefinition("foo.bar", "", {}), ToolDefinition("foo__bar", "", {})]
    with pytest.raises(DefinitionError, match="Tool name collision.*'foo__bar'"):
        await one_turn(from_model_serving("ep", config=config), AgentInput(HELLO, tools=tools))


async def test_streamed_text_over_the_cap_raises_a_sanitized_error(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(chat_chunk("abc"), chat_chunk("defgh"))
    adapter = from_model_serving("ep", config=config, max_stream_text_chars=5)
    with pytest.raises(ModelError) as raised:
        await one_turn(adapter, AgentInput(HELLO))
    assert str(raised.value) == "Databricks API error (limit_exceeded)"
    assert "streamed assistant text exceeds configured limit" in str(raised.value.__cause__)
    server.reply(chat_chunk("abc"), chat_chunk("defgh"))
    events = await run_all(adapter, AgentInput(HELLO))
    assert events[-1] == {
        "type": "status",
        "status": "error",
        "error": "Databricks API error (limit_exceeded)",
    }


async def test_tool_arguments_over_the_cap_raise(server: FakeModelServer, config: Config) -> None:
    server.reply(
        chat_chunk(tool_calls=[tc(0, "c", "f", '{"a":"')]),
        chat_chunk(tool_calls=[tc(0, args='xxxx"}')]),
    )
    adapter = from_model_serving("ep", config=config, max_tool_arguments_chars=8)
    with pytest.raises(ModelError) as raised:
        await one_turn(adapter, AgentInput(HELLO))
    assert "tool call arguments exceed" in str(raised.value.__cause__)


@pytest.mark.parametrize(
    ("chunks", "message"),
    [
        (["data: " + "x" * 300 + "\n"], "SSE line exceeds"),
        (["data: " + "x" * 300], "SSE line buffer exceeds"),
    ],
)
async def test_an_oversized_line_raises(
    server: FakeModelServer, config: Config, chunks: list[str], message: str
) -> None:
    server.reply(*chunks)
    adapter = from_model_serving("ep", config=config, max_sse_line_chars=100)
    with pytest.raises(ModelError) as raised:
        await one_turn(adapter, AgentInput(HELLO))
    assert message in str(raised.value.__cause__)


async def test_a_thought_signature_is_echoed_only_when_present(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        chat_chunk(
            tool_calls=[tc(0, "c1", "analytics__query", "{}", thoughtSignature="sig-camel-abc123")]
        )
    )
    server.reply(chat_chunk("ok"))
    server.reply(chat_chunk(tool_calls=[tc(0, "c2", "analytics__query", "{}")]))
    server.reply(chat_chunk("ok"))
    adapter = from_model_serving("ep", config=config)
    await run_all(adapter, AgentInput(HELLO, tools=[QUERY]))
    await run_all(adapter, AgentInput(HELLO, tools=[QUERY]))
    signed = server.requests[1].body["messages"][2]["tool_calls"][0]
    plain = server.requests[3].body["messages"][2]["tool_calls"][0]
    assert signed["thoughtSignature"] == "sig-camel-abc123"
    assert "thoughtSignature" not in plain and "thought_signature" not in plain


async def test_harmony_content_gives_one_answer_delta_and_one_thinking_event(
    server: FakeModelServer, config: Config
) -> None:
    parts = [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Recall docs"}]},
        {"type": "text", "text": "The default port is 8443."},
    ]
    server.reply(chat_chunk(parts))
    items = await one_turn(from_model_serving("ep", config=config), AgentInput(HELLO))
    assert items[:2] == [
        {"type": "thinking", "content": "Recall docs"},
        {"type": "message_delta", "content": "The default port is 8443."},
    ]


async def test_a_llama_style_text_tool_call_is_executed(
    server: FakeModelServer, config: Config
) -> None:
    weather = ToolDefinition("get_weather", "", {"type": "object"})
    server.reply(chat_chunk('[{"name":"get_weather","parameters":{"city":"SF"}}]'))
    server.reply(chat_chunk("Sunny."))
    calls: list[tuple[str, Any]] = []
    events = await run_all(
        from_model_serving("ep", config=config), AgentInput(HELLO, tools=[weather]), calls
    )
    assert calls == [("get_weather", {"city": "SF"})]
    assert {
        "type": "tool_call",
        "callId": "text_call_0",
        "name": "get_weather",
        "args": {"city": "SF"},
    } in events


async def test_a_python_style_text_tool_call_is_parsed(
    server: FakeModelServer, config: Config
) -> None:
    weather = ToolDefinition("get_weather", "", {"type": "object"})
    server.reply(chat_chunk("[get_weather(city='SF', unit=\"C\")]"))
    items = await one_turn(
        from_model_serving("ep", config=config), AgentInput(HELLO, tools=[weather])
    )
    outcome = items[-1]
    assert isinstance(outcome, TurnOutcome)
    assert [(c.name, c.args) for c in outcome.tool_calls] == [
        ("get_weather", {"city": "SF", "unit": "C"})
    ]


async def test_a_missing_call_id_defaults_and_empty_arguments_become_an_object(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(chat_chunk(tool_calls=[tc(0, name="analytics__query")]))
    items = await one_turn(
        from_model_serving("ep", config=config), AgentInput(HELLO, tools=[QUERY])
    )
    [call] = items[-1].tool_calls
    assert (call.id, call.args) == ("call_0", {})


async def test_an_http_error_reports_only_the_status(
    server: FakeModelServer, config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    server.reply(status=401)
    events = await run_all(from_model_serving("ep", config=config), AgentInput(HELLO))
    assert events[-1] == {
        "type": "status",
        "status": "error",
        "error": "Databricks API error (401)",
    }
    assert "secret" not in caplog.text and "dapi0123" not in caplog.text


async def test_only_set_generation_params_are_sent(server: FakeModelServer, config: Config) -> None:
    server.reply(chat_chunk("x"))
    adapter = from_model_serving(
        "ep", config=config, generation_params={"temperature": 0.2, "top_p": None}
    )
    await one_turn(adapter, AgentInput(HELLO))
    body = server.requests[0].body
    assert body["temperature"] == 0.2 and "top_p" not in body


async def test_data_lines_without_a_space_and_malformed_json_are_skipped(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        'data:{"choices":[{"delta":{"content":"no"}}]}\n', "data: {oops\n", chat_chunk("yes")
    )
    items = await one_turn(from_model_serving("ep", config=config), AgentInput(HELLO))
    assert items[0] == {"type": "message_delta", "content": "yes"}


async def test_chunks_whose_lists_are_not_lists_are_skipped(
    server: FakeModelServer, config: Config
) -> None:
    reasoning = {"type": "reasoning", "summary": 7}
    server.reply(
        chat_chunk("a", tool_calls=5),
        chat_chunk([reasoning, {"type": "text", "text": "b"}]),
        "data: [DONE]\n\n",
    )
    items = await one_turn(from_model_serving("ep", config=config), AgentInput(HELLO))
    assert items[-1] == TurnOutcome("ab")


async def test_json_nested_too_deeply_is_invalid_json(
    server: FakeModelServer, config: Config
) -> None:
    deep_args = '{"a": ' + "[" * 600 + "]" * 600 + "}"
    server.reply(
        "data: " + "[" * 100_000 + "]" * 100_000 + "\n\n",
        chat_chunk("kept", tool_calls=[tc(0, "call_1", "analytics__query", deep_args)]),
    )
    items = await one_turn(
        from_model_serving("ep", config=config), AgentInput(HELLO, tools=[QUERY])
    )
    [call] = items[-1].tool_calls
    assert items[-1].text == "kept" and call.args == deep_args  # refused by the dispatcher


async def test_a_whole_answer_whose_tool_calls_are_not_a_list_keeps_its_text(
    server: FakeModelServer, config: Config
) -> None:
    answer = {"choices": [{"message": {"content": "whole", "tool_calls": 7}}]}
    server.reply(dumps(answer))
    items = await one_turn(from_model_serving("ep", config=config), AgentInput(HELLO))
    assert items[-1] == TurnOutcome("whole")


@pytest.mark.parametrize(
    "body",
    [
        "<html><body>Sign in</body></html>",
        '{"error_code": "BAD_GATEWAY"}',
        "data: <html>\n\n",
        'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n',
        "",
    ],
)
async def test_a_body_that_is_no_completion_is_transport_not_an_empty_answer(
    server: FakeModelServer, config: Config, body: str
) -> None:
    server.reply(body)
    with pytest.raises(ModelError, match=r"Databricks API error \(transport\)"):
        await one_turn(from_model_serving("ep", config=config), AgentInput(HELLO))


async def test_an_empty_stream_is_an_empty_answer(server: FakeModelServer, config: Config) -> None:
    server.reply("data: [DONE]\n\n")
    items = await one_turn(from_model_serving("ep", config=config), AgentInput(HELLO))
    assert items == [TurnOutcome("")]


async def test_a_truncated_stream_keeps_the_text_it_had(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(chat_chunk("par"), 'data: {"choices":[{"delta":{"content":"t')
    items = await one_turn(from_model_serving("ep", config=config), AgentInput(HELLO))
    assert items[-1] == TurnOutcome("par")


async def test_a_stalled_stream_times_out_as_transport(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(chat_chunk("x"), stall=True)
    adapter = from_model_serving("ep", config=config, timeout_s=0.05)
    with pytest.raises(ModelError, match=r"\(transport\)"):
        await one_turn(adapter, AgentInput(HELLO))


async def test_an_unreachable_host_is_a_transport_error(config: Config) -> None:
    adapter = openai_compatible("gpt", base_url="http://127.0.0.1:1/v1", api_key="k")
    with pytest.raises(ModelError, match=r"Model API error \(transport\)"):
        await one_turn(adapter, AgentInput(HELLO))


async def test_openai_compatible_endpoints_use_the_same_path_with_a_key(
    server: FakeModelServer,
) -> None:
    server.reply(chat_chunk("hi"), "data: [DONE]\n\n")
    adapter = openai_compatible("gpt-x", base_url=server.url + "/v1", api_key="sk-test")
    items = await one_turn(adapter, AgentInput(HELLO))
    assert items[-1] == TurnOutcome("hi")
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.body["model"] == "gpt-x"


async def test_the_endpoint_name_comes_from_the_environment(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABRICKS_SERVING_ENDPOINT_NAME", "env ep")
    assert from_model_serving(config=config).url.endswith("/serving-endpoints/env%20ep/invocations")
    monkeypatch.delenv("DATABRICKS_SERVING_ENDPOINT_NAME")
    with pytest.raises(ValueError, match="DATABRICKS_SERVING_ENDPOINT_NAME"):
        from_model_serving(config=config)
