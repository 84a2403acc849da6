"""Sessions, cancel, owners, listing, bad input, and the service endpoints."""

from __future__ import annotations

import asyncio

from tests.client import Api, assert_clean_log, new_id


async def test_a_session_runs_one_at_a_time_in_acceptance_order(api: Api) -> None:
    ids = [new_id() for _ in range(8)]
    for invocation_id in ids:  # accepted in this order
        body = {
            "id": invocation_id,
            "input": {"sleep": 0.05},
            "session_id": "ordered",
            "background": True,
        }
        assert (await api.post(body))[0] == 202
    states = [await api.wait_status(i, {"completed"}) for i in ids]
    for before, after in zip(states, states[1:], strict=False):
        assert before["finished_at"] <= after["started_at"]


async def test_concurrent_posts_to_one_session_never_overlap(api: Api) -> None:
    ids = [new_id() for _ in range(10)]
    await asyncio.gather(
        *(
            api.post({"id": i, "input": {"sleep": 0.05}, "session_id": "burst", "background": True})
            for i in ids
        )
    )
    states = sorted(
        [await api.wait_status(i, {"completed"}) for i in ids], key=lambda s: s["started_at"]
    )
    for before, after in zip(states, states[1:], strict=False):
        assert before["finished_at"] <= after["started_at"]


async def test_sessions_belong_to_their_owner(api: Api) -> None:
    other = Api(api.session, api.base)
    blocker = new_id()
    await api.post(
        {
            "id": blocker,
            "input": {"wait_cancel": True},
            "session_id": "shared-name",
            "background": True,
        }
    )
    status, body = await other.post({"id": new_id(), "input": 1, "session_id": "shared-name"})
    assert status == 200 and body["status"] == "completed"
    await api.cancel(blocker)


async def test_cancel_a_queued_invocation_is_immediate(api: Api) -> None:
    blocker, follower = new_id(), new_id()
    await api.post(
        {"id": blocker, "input": {"wait_cancel": True}, "session_id": "c1", "background": True}
    )
    await api.wait_status(blocker, {"active"})
    await api.post({"id": follower, "input": 1, "session_id": "c1", "background": True})
    status, body = await api.cancel(follower)
    assert status == 200 and body["status"] == "cancelled"
    events = await api.events(follower)
    assert [e.type for e in events] == ["run.cancelled"]
    await api.cancel(blocker)
    await api.wait_status(blocker, {"cancelled"}, timeout=5)


async def test_cancel_an_active_invocation_stops_it_quickly(api: Api) -> None:
    invocation_id = new_id()
    await api.post(
        {"id": invocation_id, "input": {"emit": 1, "wait_cancel": True}, "background": True}
    )
    await api.wait_status(invocation_id, {"active"})
    status, _ = await api.cancel(invocation_id)
    assert status == 200
    state = await api.wait_status(invocation_id, {"cancelled"}, timeout=5)
    assert state["error"]["code"] == "cancelled"
    events = await api.events(invocation_id)
    assert_clean_log(events)
    assert events[-1].type == "run.cancelled"
    again = await api.cancel(invocation_id)
    assert again[1]["status"] == "cancelled"


async def test_cancel_hands_the_session_to_the_next_invocation(api: Api) -> None:
    first, second = new_id(), new_id()
    await api.post(
        {"id": first, "input": {"wait_cancel": True}, "session_id": "handoff", "background": True}
    )
    await api.post({"id": second, "input": 2, "session_id": "handoff", "background": True})
    await api.wait_status(first, {"active"})
    await api.cancel(first)
    await api.wait_status(second, {"completed"}, timeout=10)


async def test_cancel_of_a_finished_invocation_changes_nothing(api: Api) -> None:
    invocation_id = new_id()
    _, done = await api.post({"id": invocation_id, "input": 5})
    status, body = await api.cancel(invocation_id)
    assert status == 200 and body["status"] == "completed" and body["output"] == done["output"]


async def test_another_owner_sees_404_everywhere(api: Api) -> None:
    invocation_id = new_id()
    await api.post({"id": invocation_id, "input": 1})
    stranger = Api(api.session, api.base)
    assert (await stranger.get(invocation_id))[0] == 404
    assert (await stranger.cancel(invocation_id))[0] == 404
    async with api.session.get(
        f"{api.base}/api/invocations/{invocation_id}/events", headers=stranger.headers
    ) as r:
        assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"
    status, body = await stranger.post({"id": invocation_id, "input": 1})
    assert status == 409


async def test_unknown_ids_are_404(api: Api) -> None:
    assert (await api.get(new_id()))[0] == 404
    assert (await api.get("not-a-uuid"))[0] == 404
    assert (await api.cancel(new_id()))[0] == 404


async def test_listing_shows_only_mine_newest_first_with_filters_and_pages(api: Api) -> None:
    mine = [new_id() for _ in range(5)]
    for n, invocation_id in enumerate(mine):
        await api.post(
            {"id": invocation_id, "input": n, "session_id": "list-a" if n % 2 else "list-b"}
        )
    await Api(api.session, api.base).post({"id": new_id(), "input": 0})
    async with api.session.get(
        f"{api.base}/api/invocations", params={"limit": "2"}, headers=api.headers
    ) as r:
        page = await r.json()
    assert [i["id"] for i in page["data"]] == mine[::-1][:2]
    seen = [i["id"] for i in page["data"]]
    while page["next_cursor"]:
        params = {"limit": "2", "cursor": page["next_cursor"]}
        async with api.session.get(
            f"{api.base}/api/invocations", params=params, headers=api.headers
        ) as r:
            page = await r.json()
        seen += [i["id"] for i in page["data"]]
    assert seen == mine[::-1]
    params = {"session_id": "list-a", "status": "completed"}
    async with api.session.get(
        f"{api.base}/api/invocations", params=params, headers=api.headers
    ) as r:
        assert [i["id"] for i in (await r.json())["data"]] == [mine[3], mine[1]]
    async with api.session.get(
        f"{api.base}/api/invocations", params={"status": "bogus"}, headers=api.headers
    ) as r:
        assert r.status == 422


async def test_bad_input_gets_a_json_error(api: Api) -> None:
    good = new_id()
    cases = [
        (b"{not json", 400),
        (b'{"id": "%s", "input": NaN}' % good.encode(), 400),
        (b'{"id": "%s", "input": Infinity}' % good.encode(), 400),
        (b'{"id": "%s", "input": "a\\u0000b"}' % good.encode(), 400),
        (b"[1, 2]", 422),
        (b'{"input": 1}', 422),
        (b'{"id": 7}', 422),
        (b'{"id": "nope"}', 422),
        (b'{"id": "%s", "stream": "yes"}' % good.encode(), 422),
        (b'{"id": "%s", "session_id": ""}' % good.encode(), 422),
        (b'{"id": "%s", "session_id": "%s"}' % (good.encode(), b"s" * 257), 422),
        (b'{"id": "%s", "extra": 1}' % good.encode(), 422),
    ]
    for data, expected in cases:
        status, body, content_type = await api.post_raw(data)
        assert (status, content_type) == (expected, "application/json"), data
        assert body["error"]["code"] == "invalid_request" and body["detail"]
    assert (await api.get(good))[0] == 404  # nothing was stored


async def test_a_body_over_the_limit_is_413(api: Api) -> None:
    data = b'{"id": "%s", "input": "%s"}' % (new_id().encode(), b"x" * (1024 * 1024 + 10))
    status, body, _ = await api.post_raw(data)
    assert status == 413 and body["error"]["code"] == "payload_too_large"


async def test_reserved_event_types_and_nan_output_fail_the_run(api: Api) -> None:
    status, body = await api.post({"id": new_id(), "input": {"bad_event": True}})
    assert status == 500 and body["error"]["code"] == "invocation_failed"
    status, body = await api.post({"id": new_id(), "input": {"nan": True}})
    assert status == 500 and body["error"]["code"] == "invalid_output"


async def test_service_endpoints(api: Api) -> None:
    for path in ("/healthz", "/readyz", "/openapi.json"):
        async with api.session.get(f"{api.base}{path}") as r:
            assert r.status == 200, path
            body = await r.json()
    assert (
        "/api/invocations" in body["paths"] and "InvocationRequest" in body["components"]["schemas"]
    )
    async with api.session.get(f"{api.base}/metrics") as r:
        text = await r.text()
        assert r.status == 200 and "tether_http_requests_total" in text
