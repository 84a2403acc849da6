"""The Supervisor API adapter over real HTTP (spec §1, cases S1–S30)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from databricks.sdk.config import Config

from tests.agents.conftest import FakeModelServer, sse
from tether.agents import Message, SupervisorAdapter, supervisor_tools
from tether.agents.adapters.run import run_adapter
from tether.agents.types import SUPERVISOR_NAMESPACE, AgentEvent, AgentInput

RUNNING = {"type": "status", "status": "running"}
COMPLETE = {"type": "status", "status": "complete"}
HI = [Message("user", "Hello")]


def error(code: str) -> AgentEvent:
    return {"type": "status", "status": "error", "error": f"Supervisor API error ({code})"}


def delta(text: str) -> AgentEvent:
    return {"type": "message_delta", "content": text}


def message_item(text: str, item_id: str = "msg-1") -> dict[str, Any]:
    return {"type": "message", "id": item_id, "content": [{"type": "output_text", "text": text}]}


async def no_tools(name: str, args: Any) -> Any:
    raise AssertionError("the Supervisor API runs its tools upstream")


async def run(
    config: Config, request: AgentInput | None = None, **options: Any
) -> list[AgentEvent]:
    adapter = SupervisorAdapter("databricks-claude-sonnet-4", config=config, **options)
    return [e async for e in run_adapter(adapter, request or AgentInput(HI), no_tools)]


async def test_deltas_then_completed_give_running_deltas_complete(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        sse("response.output_text.delta", {"delta": "Hello", "item_id": "m"}),
        sse("response.output_text.delta", {"delta": " world", "item_id": "m"}),
        sse("response.completed", {"response": {}}),
    )
    assert await run(config) == [RUNNING, delta("Hello"), delta(" world"), COMPLETE]
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/ai-gateway/mlflow/v1/responses")
    assert request.body == {"model": "databricks-claude-sonnet-4", "input": "Hello", "stream": True}
    assert request.headers["Authorization"] == "Bearer x"


async def test_system_messages_become_instructions(server: FakeModelServer, config: Config) -> None:
    server.reply(sse("response.completed", {"response": {}}))
    messages = [Message("system", "Be terse."), Message("system", "Second"), *HI]
    await run(config, AgentInput(messages))
    assert server.requests[0].body["instructions"] == "Be terse.\n\nSecond"
    assert server.requests[0].body["input"] == "Hello"


async def test_several_turns_become_an_input_list_and_tool_turns_are_dropped(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(sse("response.completed", {"response": {}}))
    server.reply(sse("response.completed", {"response": {}}))
    turns = [Message("user", "a"), Message("assistant", "b"), Message("user", "c")]
    await run(config, AgentInput(turns))
    await run(config, AgentInput([Message("user", "Hi"), Message("tool", "x", "c1")]))
    assert server.requests[0].body["input"] == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    assert server.requests[1].body["input"] == "Hi"


async def test_hosted_tools_come_only_from_the_supervisor_extension(
    server: FakeModelServer, config: Config
) -> None:
    genie = supervisor_tools.genie_space("01AB", "NYC taxi").spec
    uc = supervisor_tools.uc_function("cat.schema.fn", "A function").spec
    cases: tuple[dict[str, Any], ...] = (
        {SUPERVISOR_NAMESPACE: {"hostedTools": [genie, uc]}},
        {SUPERVISOR_NAMESPACE: {"hostedTools": []}},
        {"other.namespace": {"hostedTools": [genie]}},
    )
    for extensions in cases:
        server.reply(sse("response.completed", {"response": {}}))
        await run(config, AgentInput(HI, extensions=extensions))
    assert server.requests[0].body["tools"] == [genie, uc]
    assert "tools" not in server.requests[1].body
    assert "tools" not in server.requests[2].body


@pytest.mark.parametrize(
    ("frame", "code", "secret"),
    [
        (
            sse(
                "response.failed",
                {"response": {"error": {"message": "secret-internal-stack-trace"}}},
            ),
            "upstream_failed",
            "secret-internal-stack-trace",
        ),
        (
            sse("error", {"error": "rate limited (workspace abc-123)"}),
            "upstream_unknown",
            "workspace abc-123",
        ),
        (
            sse(
                "response.output_item.done",
                {
                    "item": {
                        "id": "error",
                        "type": "error",
                        "content": [{"text": "/home/user/app.py"}],
                    }
                },
            ),
            "upstream_tool",
            "/home/user",
        ),
    ],
)
async def test_upstream_failures_map_to_codes_without_leaking(
    server: FakeModelServer, config: Config, frame: str, code: str, secret: str
) -> None:
    server.reply(frame)
    events = await run(config)
    assert events == [RUNNING, error(code)]
    assert secret not in repr(events)


async def test_a_message_item_with_the_error_id_is_still_text(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        sse(
            "response.output_item.done", {"item": message_item("hello from error-id msg", "error")}
        ),
        sse("response.completed", {"response": {}}),
    )
    assert await run(config) == [RUNNING, delta("hello from error-id msg"), COMPLETE]


async def test_a_done_message_item_without_deltas_is_emitted_once(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        sse("response.output_item.added", {"item": {"type": "message", "id": "m"}}),
        sse("response.output_item.done", {"item": message_item("Genie says hi.", "m")}),
        sse("response.completed", {"response": {"output": [message_item("x")]}}),
    )
    assert await run(config) == [RUNNING, delta("Genie says hi."), COMPLETE]


async def test_a_streamed_item_is_not_emitted_again_when_done(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        sse("response.output_text.delta", {"delta": "Hello", "item_id": "msg-1"}),
        sse("response.output_text.delta", {"delta": " world", "item_id": "msg-1"}),
        sse("response.output_item.done", {"item": message_item("Hello world")}),
        sse("response.completed", {"response": {}}),
    )
    assert await run(config) == [RUNNING, delta("Hello"), delta(" world"), COMPLETE]


async def test_deltas_without_item_id_are_not_doubled_by_the_done_item(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        sse("response.output_text.delta", {"delta": "Hello"}),
        sse("response.output_item.done", {"item": message_item("Hello")}),
        sse("response.completed", {"response": {}}),
    )
    assert await run(config) == [RUNNING, delta("Hello"), COMPLETE]


async def test_items_whose_lists_or_ids_are_malformed_are_skipped(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        sse("response.output_item.done", {"item": {"type": "message", "id": ["m"]}}),
        sse("response.output_item.done", {"item": {"type": "message", "id": "m", "content": 3}}),
        sse("response.completed", {"response": {"output": 5}}),
    )
    assert await run(config) == [RUNNING, COMPLETE]


async def test_an_http_failure_is_transport_without_host_or_body(
    server: FakeModelServer, config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    server.reply(status=500)
    events = await run(config)
    assert events == [RUNNING, error("transport")]
    assert "127.0.0.1" not in repr(events) and "secret upstream body" not in caplog.text


async def test_an_abort_while_waiting_for_headers_is_silent(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(stall_before_headers=True)
    signal = asyncio.Event()
    adapter = SupervisorAdapter("m", config=config)

    async def abort_once_stalled() -> None:
        await server.stalled.wait()
        signal.set()

    aborter = asyncio.create_task(abort_once_stalled())
    events = [e async for e in run_adapter(adapter, AgentInput(HI, signal=signal), no_tools)]
    await aborter
    assert events == [RUNNING]


async def test_an_already_aborted_signal_sends_nothing(
    server: FakeModelServer, config: Config
) -> None:
    signal = asyncio.Event()
    signal.set()
    assert await run(config, AgentInput(HI, signal=signal)) == []
    assert server.requests == []


async def test_text_is_recovered_from_the_completed_response(
    server: FakeModelServer, config: Config
) -> None:
    output = [
        {
            "type": "message",
            "id": "m",
            "content": [
                {"type": "output_text", "text": "Recovered "},
                {"type": "output_text", "text": "answer."},
            ],
        }
    ]
    server.reply(
        sse("response.created", {}),
        sse("response.in_progress", {}),
        sse("response.completed", {"response": {"status": "completed", "output": output}}),
    )
    assert await run(config) == [RUNNING, delta("Recovered answer."), COMPLETE]


async def test_recovery_is_skipped_after_a_delta(server: FakeModelServer, config: Config) -> None:
    server.reply(
        sse("response.output_text.delta", {"delta": "Hi", "item_id": "m"}),
        sse("response.completed", {"response": {"output": [message_item("Hi")]}}),
    )
    assert await run(config) == [RUNNING, delta("Hi"), COMPLETE]


async def test_nothing_follows_a_terminal_error(server: FakeModelServer, config: Config) -> None:
    server.reply(
        sse("response.failed", {"response": {}}),
        sse("response.output_text.delta", {"delta": "ignored"}),
        sse("response.completed", {"response": {}}),
    )
    assert await run(config) == [RUNNING, error("upstream_failed")]


@pytest.mark.parametrize(
    "response",
    [
        {"status": "failed", "error": {"message": "tool timeout"}},
        {"status": "completed", "error": {"code": "internal"}},
    ],
)
async def test_a_failed_completion_is_an_error_not_complete(
    server: FakeModelServer, config: Config, response: dict[str, Any]
) -> None:
    server.reply(sse("response.completed", {"response": response}))
    assert await run(config) == [RUNNING, error("upstream_failed")]


async def test_an_abort_on_a_delta_while_the_stream_stalls_stops_quietly(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(sse("response.output_text.delta", {"delta": "Hi", "item_id": "m"}), stall=True)
    signal = asyncio.Event()
    adapter = SupervisorAdapter("m", config=config)
    events = []
    async for event in run_adapter(adapter, AgentInput(HI, signal=signal), no_tools):
        events.append(event)
        if event["type"] == "message_delta":
            signal.set()
    assert events == [RUNNING, delta("Hi")]


async def test_an_oversized_block_is_transport_without_cap_detail(
    server: FakeModelServer, config: Config
) -> None:
    server.reply("data: " + "x" * (1_048_576 + 100) + "\n\n")
    events = await run(config)
    assert events == [RUNNING, error("transport")]
    assert "maxLineChars" not in repr(events)


async def test_an_empty_stream_is_transport(server: FakeModelServer, config: Config) -> None:
    server.reply()
    assert await run(config) == [RUNNING, error("transport")]


async def test_a_stalled_stream_times_out_as_transport(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(stall=True)
    assert await run(config, timeout_s=0.03) == [RUNNING, error("transport")]


async def test_incomplete_details_alone_are_benign(server: FakeModelServer, config: Config) -> None:
    server.reply(
        sse(
            "response.completed",
            {
                "response": {
                    "status": "incomplete",
                    "incomplete_details": {"reason": "max_output_tokens"},
                    "output": [message_item("Partial answer")],
                }
            },
        )
    )
    assert await run(config) == [RUNNING, delta("Partial answer"), COMPLETE]


async def test_a_non_string_delta_counts_as_an_empty_delta(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        sse("response.output_text.delta", {"item_id": 42, "delta": 123}),
        sse("response.completed", {"response": {"output": [message_item("x")]}}),
    )
    assert await run(config) == [RUNNING, delta(""), COMPLETE]


async def test_event_and_data_lines_in_separate_chunks(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        "event: response.output_text.delta\n",
        'data: {"delta":"split"}\n\n',
        sse("response.completed", {"response": {}}),
    )
    assert await run(config) == [RUNNING, delta("split"), COMPLETE]


async def test_the_type_field_stands_in_for_a_missing_event_name(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        'data: {"type":"response.output_text.delta","delta":"t"}\n\n',
        'data: {"type":"response.completed","response":{}}\n\n',
    )
    assert await run(config) == [RUNNING, delta("t"), COMPLETE]


async def test_pinned_a_failed_completion_with_output_gives_text_then_error(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(
        sse("response.completed", {"response": {"status": "failed", "output": [message_item("x")]}})
    )
    assert await run(config) == [RUNNING, delta("x"), error("upstream_failed")]


async def test_pinned_deltas_without_completed_give_no_terminal_event(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(sse("response.output_text.delta", {"delta": "a", "item_id": "m"}))
    assert await run(config) == [RUNNING, delta("a")]


async def test_frames_that_are_all_invalid_json_are_transport(
    server: FakeModelServer, config: Config
) -> None:
    server.reply("data: {nope\n\n", "event: x\ndata: also not json\n\n")
    assert await run(config) == [RUNNING, error("transport")]


def test_hosted_tool_shapes_and_tagging() -> None:
    specs = [
        supervisor_tools.genie_space("s", "d").spec,
        supervisor_tools.uc_function("c.s.f", "d").spec,
        supervisor_tools.knowledge_assistant("ka", "d").spec,
        supervisor_tools.app("my-app", "d").spec,
        supervisor_tools.uc_connection("conn", "d").spec,
    ]
    assert specs == [
        {"type": "genie_space", "genie_space": {"id": "s", "description": "d"}},
        {"type": "uc_function", "uc_function": {"name": "c.s.f", "description": "d"}},
        {
            "type": "knowledge_assistant",
            "knowledge_assistant": {"knowledge_assistant_id": "ka", "description": "d"},
        },
        {"type": "app", "app": {"name": "my-app", "description": "d"}},
        {"type": "uc_connection", "uc_connection": {"name": "conn", "description": "d"}},
    ]
    tagged = supervisor_tools.genie_space("s", "d")
    assert supervisor_tools.is_supervisor_tool(tagged)
    assert supervisor_tools.is_supervisor_tool(tagged.to_json())
    for value in (specs[0], {"type": "genie-space"}, None, "x", {}, {"__kind": "function"}):
        assert not supervisor_tools.is_supervisor_tool(value)
    with pytest.raises(ValueError, match="description"):
        supervisor_tools.genie_space("s", "")
