"""DESIGN §2: the three modes, idempotency and conflicts, against both server kinds."""

from __future__ import annotations

import asyncio

from tests.apps.contract import SECRET
from tests.client import Api, assert_clean_log, new_id


async def test_sync_completed_returns_the_output_and_canonical_id(api: Api) -> None:
    raw = new_id().upper().replace("-", "")
    status, body = await api.post({"id": raw, "input": {"output": 42}})
    assert status == 200
    assert body["status"] == "completed"
    assert body["id"] == f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}".lower()
    assert body["output"]["output"] == 42


async def test_sync_failure_is_a_500_without_the_exception_text(api: Api) -> None:
    invocation_id = new_id()
    status, body = await api.post({"id": invocation_id, "input": {"fail": True}})
    assert status == 500
    assert body["status"] == "failed"
    assert body["error"]["code"] == "invocation_failed"
    assert body["detail"] == body["error"]["message"]
    assert SECRET not in str(body)
    _, state = await api.get(invocation_id)
    assert state["status"] == "failed" and state["error"]["code"] == "invocation_failed"
    assert SECRET not in str(state)


async def test_sync_past_sync_timeout_answers_202_with_urls(api: Api) -> None:
    invocation_id = new_id()
    status, body = await api.post({"id": invocation_id, "input": {"sleep": 3}})
    assert status == 202
    assert body["status_url"] == f"/api/invocations/{invocation_id}"
    assert body["events_url"] == f"/api/invocations/{invocation_id}/events"
    done = await api.wait_status(invocation_id, {"completed"})
    assert done["output"]["output"] == {"sleep": 3}


async def test_background_answers_202_at_once_and_wins_over_stream(api: Api) -> None:
    invocation_id = new_id()
    status, body = await api.post(
        {"id": invocation_id, "input": {"sleep": 0.2}, "background": True, "stream": True}
    )
    assert status == 202
    assert body["status"] in {"queued", "active"}
    assert body["status_url"] == f"/api/invocations/{invocation_id}"
    assert body["events_url"].endswith("/events")
    done = await api.wait_status(invocation_id, {"completed"})
    assert done["attempt"] == 1 and done["last_event_id"] == 2
    for key in ("created_at", "started_at", "finished_at", "session_id"):
        assert key in done


async def test_stream_mode_sends_every_event_then_closes(api: Api) -> None:
    response, events = await api.stream({"id": new_id(), "input": {"emit": 5}})
    assert response.status == 200
    assert response.headers["Cache-Control"] == "no-cache, no-transform"
    assert response.headers["X-Accel-Buffering"] == "no"
    assert_clean_log(events)
    assert [e.type for e in events] == ["run.started"] + ["tick"] * 5 + ["run.completed"]
    assert events[0].data == {"type": "run.started", "attempt": 1}
    assert events[1].data["i"] == 0


async def test_stream_of_a_failing_run_still_ends_with_its_terminal_event(api: Api) -> None:
    response, events = await api.stream({"id": new_id(), "input": {"emit": 1, "fail": True}})
    assert response.status == 200
    assert_clean_log(events)
    assert events[-1].type == "run.failed"
    assert events[-1].data["error"]["code"] == "invocation_failed"
    assert SECRET not in str([e.data for e in events])


async def test_same_id_same_request_never_runs_twice(api: Api) -> None:
    invocation_id = new_id()
    body = {"id": invocation_id, "input": {"emit": 2}, "session_id": "s-same"}
    first = await api.post(body)
    second = await api.post(body)
    assert first == second and first[0] == 200
    status, accepted = await api.post({**body, "background": True})
    assert status == 202 and accepted["status"] == "completed"
    _, events = await api.stream(body)
    assert [e.type for e in events].count("run.started") == 1


async def test_same_id_with_other_input_or_session_is_a_conflict(api: Api) -> None:
    invocation_id = new_id()
    assert (await api.post({"id": invocation_id, "input": {"a": 1}, "background": True}))[0] == 202
    for other in ({"input": {"a": 2}}, {"input": {"a": 1}, "session_id": "x"}):
        status, body = await api.post({"id": invocation_id, **other})
        assert status == 409
        assert body["error"]["code"] == "conflict"
        assert body["detail"] == "id was already used for another request"


async def test_canonical_json_decides_sameness(api: Api) -> None:
    invocation_id = new_id()
    ok = await api.post_raw(f'{{"id":"{invocation_id}","input":{{"a":1,"b":[1,2]}}}}'.encode())
    again = await api.post_raw(
        f'{{ "input" : {{"b":[1, 2], "a":1}}, "id":"{invocation_id.upper()}"}}'.encode()
    )
    assert ok[0] == again[0] == 200


async def test_twenty_identical_concurrent_posts_execute_once(api: Api) -> None:
    invocation_id = new_id()
    body = {"id": invocation_id, "input": {"emit": 1, "sleep": 0.2}}
    results = await asyncio.gather(*(api.post(body) for _ in range(20)))
    assert {status for status, _ in results} == {200}
    assert len({str(b) for _, b in results}) == 1
    events = await api.events(invocation_id)
    assert [e.type for e in events].count("run.started") == 1
    assert_clean_log(events)


async def test_conflicting_concurrent_posts_have_one_winner(api: Api) -> None:
    invocation_id = new_id()
    bodies = [{"id": invocation_id, "input": {"n": n}, "background": True} for n in range(20)]
    results = await asyncio.gather(*(api.post(b) for b in bodies))
    statuses = sorted(status for status, _ in results)
    assert statuses.count(202) == 1 and statuses.count(409) == 19
