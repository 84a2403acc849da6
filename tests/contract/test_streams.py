"""Replay and reconnection: exactly what was missed, no gap, no duplicate."""

from __future__ import annotations

import asyncio

from tests.client import Api, SseEvent, assert_clean_log, new_id
from tests.rawhttp import RawConnection, request


async def test_replay_after_every_cursor_of_a_finished_run(api: Api) -> None:
    invocation_id = new_id()
    _, full = await api.stream({"id": invocation_id, "input": {"emit": 6}})
    assert_clean_log(full)
    for after in range(len(full) + 1):
        tail = await api.events(invocation_id, after=after)
        assert tail == full[after:]


async def test_last_event_id_header_is_honoured_when_after_is_absent(api: Api) -> None:
    invocation_id = new_id()
    _, full = await api.stream({"id": invocation_id, "input": {"emit": 3}})
    assert await api.events(invocation_id, last_event_id=2) == full[2:]
    assert await api.events(invocation_id, after=4, last_event_id=1) == full[4:]


async def test_reconnecting_to_a_live_run_at_every_point_loses_nothing(api: Api) -> None:
    invocation_id = new_id()
    body = {"id": invocation_id, "input": {"emit": 12, "emit_sleep": 0.05}, "background": True}
    assert (await api.post(body))[0] == 202
    received: list[SseEvent] = []
    cursor = 0
    while not received or received[-1].type != "run.completed":
        chunk = await api.events(invocation_id, after=cursor, limit=2)  # drop after two events
        received.extend(chunk)
        cursor = received[-1].id
    assert_clean_log(received)
    assert len(received) == 14


async def test_many_readers_of_one_live_run_see_the_same_log(api: Api) -> None:
    invocation_id = new_id()
    assert (
        await api.post(
            {"id": invocation_id, "input": {"emit": 20, "emit_sleep": 0.01}, "background": True}
        )
    )[0] == 202
    logs = await asyncio.gather(*(api.events(invocation_id, after=0) for _ in range(10)))
    for log in logs:
        assert_clean_log(log)
        assert log == logs[0]


async def test_bad_after_is_rejected(api: Api) -> None:
    invocation_id = new_id()
    await api.post({"id": invocation_id, "background": True})
    async with api.session.get(
        f"{api.base}/api/invocations/{invocation_id}/events",
        params={"after": "-1"},
        headers=api.headers,
    ) as r:
        assert r.status == 422
        assert (await r.json())["error"]["code"] == "invalid_request"


async def test_another_owners_stream_and_an_unknown_one_are_both_404(api: Api) -> None:
    invocation_id = new_id()
    _, full = await api.stream({"id": invocation_id, "input": {"emit": 2}})
    assert_clean_log(full)
    stranger = Api(api.session, api.base)
    for target in (invocation_id, new_id(), "not-a-uuid"):
        async with api.session.get(
            f"{api.base}/api/invocations/{target}/events", headers=stranger.headers
        ) as r:
            assert r.status == 404, target
            body = await r.json()
            assert body["error"]["code"] == "not_found"
            assert body == (await stranger.get(new_id()))[1]  # says nothing the unknown does not


async def test_a_reader_past_the_end_of_a_finished_run_gets_an_empty_stream(api: Api) -> None:
    invocation_id = new_id()
    _, full = await api.stream({"id": invocation_id, "input": {"emit": 2}})
    assert await api.events(invocation_id, after=len(full)) == []
    assert await api.events(invocation_id, after=len(full) + 50) == []


async def test_a_reader_past_the_end_of_a_live_run_is_closed_when_the_run_ends(api: Api) -> None:
    invocation_id = new_id()
    body = {"id": invocation_id, "input": {"emit": 4, "emit_sleep": 0.3}, "background": True}
    assert (await api.post(body))[0] == 202
    url = f"{api.base}/api/invocations/{invocation_id}/events"
    async with api.session.get(url, params={"after": "100"}, headers=api.headers) as r:
        assert r.status == 200
        text = await r.text()  # ends with the run, before the first keep-alive comment
    assert text == ""
    assert (await api.get(invocation_id))[1]["status"] == "completed"


async def test_a_head_request_for_a_stream_is_405_and_the_connection_stays_usable(
    api: Api,
) -> None:
    invocation_id = new_id()
    _, full = await api.stream({"id": invocation_id, "input": {"emit": 2}})
    connection = await RawConnection.open(api.base)
    try:
        path = f"/api/invocations/{invocation_id}/events"
        await connection.send(request("HEAD", path, api.headers))
        head = await connection.read_head()
        assert head.status == 405 and head.headers["allow"] == "GET"
        assert connection.received == b""  # no body: the stored events were written as one once
        await connection.send(request("GET", "/healthz"))
        assert (await connection.read_head()).status == 200
    finally:
        connection.close()
