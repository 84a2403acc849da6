"""One cancelled outcome: the same status document, events and sync answer whether the
invocation was queued (cancelled by the API) or running (cancelled by its worker)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.client import Api, new_id

RUN_FACTS = {"id", "session_id", "attempt", "created_at", "started_at", "finished_at"}
"""What differs between two runs; everything else is the outcome."""
REQUEST_FACTS = {"tenant", "priority"}
"""What the request decided (the same for both runs here), not the outcome."""


def outcome(document: dict[str, Any]) -> dict[str, Any]:
    left_out = RUN_FACTS | REQUEST_FACTS | {"last_event_id"}
    return {k: v for k, v in document.items() if k not in left_out}


async def cancelled_while_queued(api: Api, session: str) -> tuple[dict[str, Any], Any]:
    """A sync caller waits on an invocation queued behind a blocker, and it is cancelled."""
    blocker, queued = new_id(), new_id()
    blocking = {"id": blocker, "input": {"wait_cancel": True}, "session_id": session}
    assert (await api.post({**blocking, "background": True}))[0] == 202
    await api.wait_status(blocker, {"active"})
    body = {"id": queued, "input": 1, "session_id": session}
    waiting = asyncio.create_task(api.post(body))
    await api.wait_status(queued, {"queued"})
    status, document = await api.cancel(queued)
    assert status == 200 and document["status"] == "cancelled"
    answer = await waiting
    await api.cancel(blocker)
    return body, answer


async def cancelled_while_running(api: Api) -> tuple[dict[str, Any], Any]:
    """A sync caller waits on a running invocation, and its worker cancels the handler."""
    invocation_id = new_id()
    body = {"id": invocation_id, "input": {"emit": 1, "wait_cancel": True}}
    waiting = asyncio.create_task(api.post(body))
    await api.wait_status(invocation_id, {"active"})
    assert (await api.cancel(invocation_id))[0] == 200
    return body, await waiting


async def test_a_cancelled_invocation_has_one_document_one_event_and_one_sync_answer(
    api: Api,
) -> None:
    queued_body, queued_answer = await cancelled_while_queued(api, "cancel-one-outcome")
    running_body, running_answer = await cancelled_while_running(api)

    for body, answer in ((queued_body, queued_answer), (running_body, running_answer)):
        status, sync = answer
        assert status == 409, sync
        assert sync == {
            "id": body["id"],
            "status": "cancelled",
            "error": {"code": "cancelled", "message": "the invocation was cancelled"},
            "detail": "the invocation was cancelled",
        }
        assert await api.post(body) == answer  # a later sync caller gets the same answer

    queued_doc = (await api.get(queued_body["id"]))[1]
    running_doc = (await api.get(running_body["id"]))[1]
    assert set(queued_doc) == set(running_doc)
    assert (
        outcome(queued_doc)
        == outcome(running_doc)
        == {
            "status": "cancelled",
            "error": {"code": "cancelled", "message": "the invocation was cancelled"},
        }
    )
    assert queued_doc["attempt"] == 0 and queued_doc["started_at"] is None
    assert running_doc["attempt"] == 1 and running_doc["started_at"] is not None

    queued_events = await api.events(queued_body["id"])
    running_events = await api.events(running_body["id"])
    assert [e.type for e in queued_events] == ["run.cancelled"]
    assert running_events[-1].type == "run.cancelled"
    assert queued_events[-1].data == running_events[-1].data


async def test_cancelling_again_returns_the_same_document(api: Api) -> None:
    body, _ = await cancelled_while_running(api)
    first = await api.get(body["id"])
    assert await api.cancel(body["id"]) == first
