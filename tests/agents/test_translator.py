"""AgentEvent → Responses stream translation (spec §3.3, cases T1–T15)."""

from __future__ import annotations

from typing import Any

from tether.agents import ResponsesTranslator
from tether.agents.types import AgentEvent


def feed(*events: AgentEvent, finalize: bool = True) -> list[dict[str, Any]]:
    translator = ResponsesTranslator()
    out = [e for event in events for e in translator.translate(event)]
    return out + (translator.finalize() if finalize else [])


def types(out: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in out]


DELTA = {"type": "message_delta", "content": "Hi"}
CALL = {"type": "tool_call", "callId": "c1", "name": "lookup", "args": {"q": "x"}}
RESULT = {"type": "tool_result", "callId": "c1", "result": "ok"}


def test_the_first_delta_opens_a_message() -> None:
    assert types(feed(DELTA, finalize=False)) == [
        "response.output_item.added",
        "response.output_text.delta",
    ]


def test_a_second_delta_is_only_a_delta() -> None:
    translator = ResponsesTranslator()
    translator.translate(DELTA)
    assert types(translator.translate(DELTA)) == ["response.output_text.delta"]


def test_sequence_numbers_strictly_increase() -> None:
    out = feed(DELTA, DELTA)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))


def test_a_tool_call_is_an_added_and_done_function_call() -> None:
    out = feed(CALL, finalize=False)
    assert types(out) == ["response.output_item.added", "response.output_item.done"]
    item = out[0]["item"]
    assert (item["type"], item["name"], item["call_id"]) == ("function_call", "lookup", "c1")
    assert item["arguments"] == '{"q":"x"}'


def test_tool_result_outputs() -> None:
    def output(event: AgentEvent) -> str:
        return str(feed(event, finalize=False)[0]["item"]["output"])

    assert output({"type": "tool_result", "callId": "c", "result": {"rows": 42}}) == '{"rows":42}'
    assert (
        output({"type": "tool_result", "callId": "c", "result": None, "error": "Query failed"})
        == "Query failed"
    )
    assert output({"type": "tool_result", "callId": "c"}) == ""


def test_thinking_metadata_and_structured_output_pass_through() -> None:
    out = feed(
        {"type": "thinking", "content": "hmm"},
        {"type": "metadata", "data": {"t": 1}},
        {"type": "structured_output", "data": {"a": 1}},
        finalize=False,
    )
    assert [(e["type"], e.get("content", e.get("data"))) for e in out] == [
        ("appkit.thinking", "hmm"),
        ("appkit.metadata", {"t": 1}),
        ("appkit.structured_output", {"a": 1}),
    ]


def test_status_complete_closes_the_message_and_completes() -> None:
    out = feed(DELTA, {"type": "status", "status": "complete"}, finalize=False)
    assert types(out)[-2:] == ["response.output_item.done", "response.completed"]
    assert out[-2]["item"]["content"] == [{"type": "output_text", "text": "Hi"}]


def test_status_error_is_error_then_failed() -> None:
    out = feed({"type": "status", "status": "error", "error": "Something broke"}, finalize=False)
    assert [(e["type"], e.get("error")) for e in out] == [
        ("error", "Something broke"),
        ("response.failed", None),
    ]


def test_output_indices_are_claimed_in_order() -> None:
    out = feed(CALL, RESULT, DELTA, DELTA)
    added = [e["output_index"] for e in out if e["type"] == "response.output_item.added"]
    assert added == [0, 1, 2]


def test_worked_example_pairs_added_and_done_per_index() -> None:
    out = feed(
        {"type": "metadata", "data": {"threadId": "t1"}},
        DELTA,
        CALL,
        RESULT,
        {"type": "message_delta", "content": "Done"},
    )
    items = [
        (e["type"].rsplit(".", 1)[-1], e["output_index"])
        for e in out
        if e["type"] in ("response.output_item.added", "response.output_item.done")
    ]
    assert items == [
        ("added", 0),
        ("done", 0),
        ("added", 1),
        ("done", 1),
        ("added", 2),
        ("done", 2),
        ("added", 3),
        ("done", 3),
    ]
    assert types(out)[0] == "appkit.metadata" and types(out)[-1] == "response.completed"
    assert len(out) == 12


def test_a_final_message_replaces_the_streamed_text_without_a_second_added() -> None:
    out = feed(
        {"type": "message_delta", "content": "partial"},
        {"type": "message", "content": "full final content"},
    )
    assert types(out).count("response.output_item.added") == 1
    done = [e for e in out if e["type"] == "response.output_item.done"]
    assert len(done) == 1
    assert done[0]["item"]["content"][0]["text"] == "full final content"


def test_finalize_twice_returns_nothing_the_second_time() -> None:
    translator = ResponsesTranslator()
    translator.translate(DELTA)
    assert translator.finalize()
    assert translator.finalize() == []


def test_nothing_completes_after_a_failure() -> None:
    translator = ResponsesTranslator()
    out = translator.translate({"type": "status", "status": "error", "error": "x"})
    out += translator.finalize() + translator.translate(DELTA)
    assert types(out) == ["error", "response.failed"]


def test_telemetry_events_are_dropped() -> None:
    assert feed({"type": "model_start"}, {"type": "remote_trace"}, finalize=False) == []


def test_an_approval_request_becomes_appkit_approval_pending_and_its_decision_is_not_streamed() -> (
    None
):
    pending = {
        "type": "approval.pending",
        "approval_id": "approval-1",
        "call_id": "c1",
        "tool_name": "delete_file",
        "args": {"path": "a"},
        "annotations": {"effect": "destructive"},
        "agent": "janitor",
        "agent_path": ["janitor"],
    }
    resolved = {"type": "approval.resolved", "approval_id": "approval-1", "decision": "deny"}
    assert feed(pending, resolved, finalize=False) == [
        {
            "type": "appkit.approval_pending",
            "approval_id": "approval-1",
            "tool_name": "delete_file",
            "args": {"path": "a"},
            "annotations": {"effect": "destructive"},
            "agent": "janitor",
            "sequence_number": 0,
        }
    ]


def test_an_invocations_stream_shows_an_approval_once_the_run_waits_on_it() -> None:
    """``/api/agents/approve`` finds an approval only once the run parked on it: a client that
    approves as soon as it reads ``appkit.approval_pending`` is never answered 404."""
    translator = ResponsesTranslator("inv-1")
    pending = {"type": "approval.pending", "approval_id": "approval-1", "tool_name": "wipe"}
    other = {"type": "run.waiting", "waiting_for": [{"wait": "approval-2"}]}
    waiting = {"type": "run.waiting", "waiting_for": [{"wait": "approval-1", "kind": "input"}]}
    assert translator.translate(pending) == []
    assert translator.translate(pending) == []  # an attempt that announced it again
    assert translator.translate(other) == []
    out = translator.translate(waiting)
    assert [(e["type"], e["approval_id"], e["stream_id"]) for e in out] == [
        ("appkit.approval_pending", "approval-1", "inv-1")
    ]
    assert translator.translate(waiting) == []


def test_every_stream_of_one_invocation_names_its_items_alike() -> None:
    """A client that reconnects (a new translator over the same events) meets the item ids it
    saw; another invocation's items are named otherwise."""
    events: list[AgentEvent] = [DELTA, CALL, RESULT, DELTA, {"type": "message", "content": "Hi"}]

    def stream(invocation_id: str) -> list[dict[str, Any]]:
        translator = ResponsesTranslator(invocation_id)
        return [e for event in events for e in translator.translate(event)]

    first, again, other = stream("inv-1"), stream("inv-1"), stream("inv-2")
    assert first == again
    ids = {e["item"]["id"] for e in first if "item" in e}
    assert len(ids) == 4 and {i.split("_")[0] for i in ids} == {"msg", "fc"}
    assert ids.isdisjoint({e["item"]["id"] for e in other if "item" in e})
