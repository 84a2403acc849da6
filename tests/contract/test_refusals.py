"""Bad input gets a 4xx in the one error shape (the client checks the shape against the OpenAPI
document), and a refused request creates nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from yarl import URL

from tests.client import Api, new_id, read_sse

JSON = "application/json"


async def call(
    api: Api,
    method: str,
    path: str,
    *,
    body: Any = None,
    content_type: str | None = JSON,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One request with exactly these headers; ``path`` is sent as written (already encoded)."""
    sent = {**api.headers, **(headers or {})}
    if content_type is not None:
        sent["Content-Type"] = content_type
    data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    async with api.session.request(
        method,
        URL(f"{api.base}{path}", encoded=True),
        data=data,
        headers=sent,
        skip_auto_headers=() if content_type is not None else ("Content-Type",),
    ) as r:
        if r.content_type == "text/event-stream":
            return r.status, await read_sse(r)
        return r.status, await r.json()


def assert_refused(answer: tuple[int, Any], status: int, code: str) -> None:
    got, body = answer
    assert (got, body["error"]["code"]) == (status, code), body
    assert body["detail"] == body["error"]["message"]


async def assert_nothing_stored(api: Api, invocation_id: str) -> None:
    assert (await api.get(invocation_id))[0] == 404


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/json",
        "application/jsonl",
    ],
)
async def test_a_post_that_is_not_json_starts_nothing(api: Api, content_type: str | None) -> None:
    invocation_id = new_id()
    body = {"id": invocation_id, "input": 1}
    answer = await call(api, "POST", "/api/invocations", body=body, content_type=content_type)
    assert_refused(answer, 415, "unsupported_media_type")
    await assert_nothing_stored(api, invocation_id)


async def test_json_media_types_with_parameters_or_a_suffix_are_json(api: Api) -> None:
    for content_type in (
        "application/json; charset=utf-8",
        "application/vnd.x+json",
        "Application/JSON",
    ):
        answer = await call(
            api,
            "POST",
            "/api/invocations",
            body={"id": new_id(), "input": 1},
            content_type=content_type,
        )
        assert answer[0] == 200, (content_type, answer)


async def test_a_cancel_that_is_not_json_cancels_nothing(api: Api) -> None:
    invocation_id = new_id()
    await api.post({"id": invocation_id, "input": {"wait_cancel": True}, "background": True})
    await api.wait_status(invocation_id, {"active"})
    cancel = f"/api/invocations/{invocation_id}/cancel"
    for content_type in (None, "text/plain", "application/x-www-form-urlencoded"):
        answer = await call(api, "POST", cancel, content_type=content_type)
        assert_refused(answer, 415, "unsupported_media_type")
    assert (await api.get(invocation_id))[1]["status"] == "active"
    assert (await call(api, "POST", cancel, body={}))[0] == 200
    await api.wait_status(invocation_id, {"cancelled"})


def nested(depth: int) -> str:
    """JSON text of arrays nested ``depth`` levels deep (too deep for ``json.dumps``)."""
    return "[" * depth + "0" + "]" * depth


async def test_json_nested_too_deep_is_refused_and_just_deep_enough_is_not(api: Api) -> None:
    for depth in (1_000, 100):  # the body is one level more than its input
        invocation_id = new_id()
        raw = f'{{"id": "{invocation_id}", "input": {nested(depth)}}}'.encode()
        answer = await call(api, "POST", "/api/invocations", body=raw)
        assert_refused(answer, 400, "invalid_request")
        assert "nested" in answer[1]["detail"]
        await assert_nothing_stored(api, invocation_id)
    status, done = await api.post({"id": new_id(), "input": json.loads(nested(99))})
    assert status == 200 and done["output"]["output"] == json.loads(nested(99))


async def test_a_number_too_large_for_a_float_is_refused_not_failed(api: Api) -> None:
    """``1e999`` is valid JSON text that parses as infinity, which JSON cannot hold: a 422 with
    the reason, before anything is stored."""
    for number in ("1e999", "-1e999", "[0.5, 1E400]"):
        invocation_id = new_id()
        raw = f'{{"id": "{invocation_id}", "input": {number}}}'.encode()
        answer = await call(api, "POST", "/api/invocations", body=raw)
        assert_refused(answer, 422, "invalid_request")
        assert answer[1]["detail"] == "input: NaN and Infinity are not valid JSON"
        await assert_nothing_stored(api, invocation_id)


async def test_lone_surrogates_are_refused_and_pairs_are_text(api: Api) -> None:
    invocation_id = new_id()
    for field in ('"input": "\\ud800"', '"input": {"\\udfff": 1}', '"session_id": "a\\ud800"'):
        raw = f'{{"id": "{invocation_id}", {field}}}'.encode()
        assert_refused(
            await call(api, "POST", "/api/invocations", body=raw), 400, "invalid_request"
        )
    await assert_nothing_stored(api, invocation_id)
    raw = f'{{"id": "{invocation_id}", "input": "\\ud83d\\ude00"}}'.encode()
    status, done = await call(api, "POST", "/api/invocations", body=raw)
    assert status == 200 and done["output"]["output"] == "\N{GRINNING FACE}"


async def test_input_null_is_accepted_and_handed_over_as_is(api: Api) -> None:
    status, done = await api.post({"id": new_id(), "input": None})
    assert status == 200 and done["output"]["output"] is None


BAD_CURSORS = [
    ("?after=%E2%91%A0", {}),  # ①: str.isdigit() says yes, int() says no
    ("?after=%C2%B2", {}),  # ²
    ("?after=-1", {}),
    ("?after=99999999999999999999", {}),  # past bigint
    ("?after=", {}),
    ("?after=1&after=2", {}),  # read neither as the first nor as the last
    ("", {"Last-Event-ID": "²"}),
    ("", {"Last-Event-ID": "1.5"}),
    ("", {"Last-Event-ID": "٣"}),  # int() would take this Arabic-Indic 3
]


@pytest.mark.parametrize(("query", "headers"), BAD_CURSORS)
async def test_a_stream_with_a_bad_cursor_is_refused_before_it_is_accepted(
    api: Api, query: str, headers: dict[str, str]
) -> None:
    invocation_id = new_id()
    body = {"id": invocation_id, "input": 1, "stream": True}
    answer = await call(api, "POST", f"/api/invocations{query}", body=body, headers=headers)
    assert_refused(answer, 422, "invalid_request")
    await assert_nothing_stored(api, invocation_id)
    existing = new_id()
    await api.post({"id": existing, "input": 1})
    answer = await call(api, "GET", f"/api/invocations/{existing}/events{query}", headers=headers)
    assert_refused(answer, 422, "invalid_request")


async def test_a_stream_post_resumes_after_its_last_event_id(api: Api) -> None:
    body = {"id": new_id(), "input": {"emit": 3}, "stream": True}
    _, full = await call(api, "POST", "/api/invocations", body=body)
    _, tail = await call(api, "POST", "/api/invocations", body=body, headers={"Last-Event-ID": "2"})
    assert [e.type for e in full] == ["run.started", "tick", "tick", "tick", "run.completed"]
    assert tail == full[2:]


@pytest.mark.parametrize(
    "query",
    [
        "cursor=99999999999999999999",
        "cursor=-1",
        "cursor=%E2%91%A0",
        "session_id=a%00b",
        "session_id=" + "s" * 257,
        "session_id=",
        "limit=0",
        "limit=201",
        "limit=%C2%B2",
        "limit=",
        "status=bogus",
        "limit=5&limit=6",
        "status=queued&status=completed",
    ],
)
async def test_a_bad_list_query_is_refused(api: Api, query: str) -> None:
    assert_refused(await call(api, "GET", f"/api/invocations?{query}"), 422, "invalid_request")


async def test_list_queries_at_their_limits_are_fine(api: Api) -> None:
    for query in ("limit=200", "limit=1", "cursor=9223372036854775807", "cursor=0", "session_id=a"):
        status, page = await call(api, "GET", f"/api/invocations?{query}")
        assert status == 200, (query, page)


async def test_another_owners_id_gets_the_answer_of_any_reused_id_and_learns_nothing(
    api: Api,
) -> None:
    """Ids are global, so only accepting could hide that one is taken; the stranger gets exactly
    what the owner gets for reusing it with another request: no owner, status, input or output."""
    invocation_id = new_id()
    request = {"id": invocation_id, "input": {"output": "private"}}
    assert (await api.post(request))[0] == 200
    before = await api.get(invocation_id)
    reused = await api.post({**request, "input": "other"})
    assert reused[0] == 409 and reused[1]["error"]["code"] == "conflict"
    stranger = Api(api.session, api.base)
    for mode in ({}, {"stream": True}, {"background": True}):
        assert await stranger.post({**request, **mode}) == reused
        assert await stranger.post({**request, **mode, "input": "other"}) == reused
    assert (await stranger.get(invocation_id))[0] == 404
    assert await api.get(invocation_id) == before


async def test_a_method_a_path_does_not_serve_gets_405_with_allow(api: Api) -> None:
    async with api.session.delete(f"{api.base}/api/invocations", headers=api.headers) as r:
        assert r.status == 405 and set(r.headers["Allow"].split(",")) >= {"GET", "POST"}
        assert (await r.json())["error"]["code"] == "method_not_allowed"
