"""Durable execution over HTTP, in both modes: park, input, replay, timers, cancel, sessions."""

from __future__ import annotations

from typing import Any

from tests.client import Api, assert_clean_log, new_id


async def parked(api: Api, session: str | None = None, **spec: Any) -> tuple[str, Any]:
    invocation_id = new_id()
    body = {"id": invocation_id, "input": {"wait": "answer", **spec}, "background": True}
    if session is not None:
        body["session_id"] = session
    assert (await api.post(body))[0] == 202
    return invocation_id, await api.wait_status(invocation_id, {"waiting"})


async def test_a_parked_invocation_lists_its_waits_and_resumes_with_the_input(api: Api) -> None:
    invocation_id, status = await parked(api, step="before")
    (wait,) = status["waiting_for"]
    assert wait["wait"] == "answer" and wait["kind"] == "input" and wait["prompt"] == "value?"
    assert wait["expires_at"] is None
    code, body = await api.send_input(invocation_id, "answer", {"n": 42})
    assert code == 200 and body["status"] in {"queued", "active", "completed"}
    done = await api.wait_status(invocation_id, {"completed"})
    assert done["output"]["value"] == {"n": 42}
    assert done["output"]["step_attempt"] == 1  # the step's recorded value, not re-run
    events = await api.events(invocation_id)
    assert_clean_log(events)
    types = [e.type for e in events]
    assert types.count("step.ran") == 1
    assert types.index("run.waiting") < types.index("run.resumed") < types.index("run.completed")


async def test_input_is_idempotent_conflicts_and_is_owned(api: Api) -> None:
    invocation_id, _ = await parked(api)
    assert (await api.send_input(invocation_id, "nope", 1))[0] == 404
    stranger = Api(api.session, api.base)
    assert (await stranger.send_input(invocation_id, "answer", 1))[0] == 404
    assert (await api.send_input(invocation_id, "answer", "yes"))[0] == 200
    assert (await api.send_input(invocation_id, "answer", "yes"))[0] == 200
    code, body = await api.send_input(invocation_id, "answer", "no")
    assert code == 409 and body["error"]["code"] == "conflict"
    done = await api.wait_status(invocation_id, {"completed"})
    assert done["output"]["value"] == "yes"


async def test_bad_input_bodies_are_refused(api: Api) -> None:
    invocation_id, _ = await parked(api)
    for body in ({}, {"wait": "answer"}, {"wait": 3, "value": 1}, {"wait": "answer", "x": 1}):
        async with api.session.post(
            f"{api.base}/api/invocations/{invocation_id}/input", json=body, headers=api.headers
        ) as r:
            assert r.status == 422, body
    too_large = b'{"wait": "answer", "value": [1e999]}'  # valid JSON text, infinity parsed
    async with api.session.post(
        f"{api.base}/api/invocations/{invocation_id}/input",
        data=too_large,
        headers={**api.headers, "Content-Type": "application/json"},
    ) as r:
        assert r.status == 422 and "Infinity" in (await r.json())["detail"]
    assert (await api.get(invocation_id))[1]["status"] == "waiting"


async def test_a_sync_post_that_parks_answers_202_with_what_it_waits_for(api: Api) -> None:
    code, body = await api.post({"id": new_id(), "input": {"wait": "answer"}})
    assert code == 202 and body["status"] == "waiting"
    assert [w["wait"] for w in body["waiting_for"]] == ["answer"]
    assert body["status_url"].endswith(body["id"])


async def test_cancelling_a_waiting_invocation_starts_no_attempt(api: Api) -> None:
    invocation_id, status = await parked(api)
    code, body = await api.cancel(invocation_id)
    assert code == 200 and body["status"] == "cancelled"
    assert body["attempt"] == status["attempt"] and body["error"]["code"] == "cancelled"
    assert (await api.send_input(invocation_id, "answer", 1))[0] == 409


async def test_the_next_invocation_of_a_session_waits_behind_a_parked_one(api: Api) -> None:
    first, _ = await parked(api, session="s")
    second = new_id()
    body = {"id": second, "input": {}, "session_id": "s", "background": True}
    assert (await api.post({**body}))[0] == 202
    assert (await api.get(second))[1]["status"] == "queued"
    await api.send_input(first, "answer", 1)
    first_done = await api.wait_status(first, {"completed"})
    second_done = await api.wait_status(second, {"completed"})
    assert first_done["finished_at"] <= second_done["started_at"]


async def test_a_wait_timeout_raises_in_the_handler(api: Api) -> None:
    invocation_id = new_id()
    body = {"id": invocation_id, "input": {"wait": "w", "wait_timeout": 0.5}, "background": True}
    await api.post(body)
    done = await api.wait_status(invocation_id, {"completed"})
    assert done["output"]["timed_out"] is True
    assert (await api.send_input(invocation_id, "w", 1))[0] == 409


async def test_a_durable_sleep_parks_and_a_timer_resumes_it(api: Api) -> None:
    invocation_id = new_id()
    body = {"id": invocation_id, "input": {"durable_sleep": 0.6, "step": "s"}, "background": True}
    await api.post(body)
    done = await api.wait_status(invocation_id, {"completed"})
    events = await api.events(invocation_id)
    types = [e.type for e in events]
    assert "run.waiting" in types and "run.resumed" in types and types.count("step.ran") == 1
    assert done["attempt"] == 2
