"""A bad request never hurts another (issue 9), over HTTP against both server kinds: requests
that arrive together share one transaction, and so do runs that finish together."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlparse

from tests.client import Api, new_id

SURROGATE = "\\ud83d"  # half an emoji, as JSON text spells it
NUL = "\\u0000"


def bad_bodies() -> list[bytes]:
    """Eight requests the gateway must refuse before they join a batch, each for a different
    reason."""
    bodies = [
        f'{{"id": "{{id}}", "input": {{"text": "{SURROGATE}"}}}}',
        '{"id": "{id}", "input": "\\udfff"}',
        '{"id": "{id}", "input": NaN}',
        '{"id": "{id}", "input": [Infinity]}',
        f'{{"id": "{{id}}", "input": "a{NUL}b"}}',
        f'{{"id": "{{id}}", "input": 1, "session_id": "s{NUL}"}}',
        f'{{"id": "{{id}}", "input": 1, "session_id": "s{SURROGATE}"}}',
        '{"id": "{id}", "input": 1, "session_id": "' + "s" * 257 + '"}',
    ]
    return [body.replace("{id}", new_id()).encode() for body in bodies]


async def post_as_raw_owner(base: str, owner: bytes, body: dict[str, Any]) -> tuple[int, Any]:
    """POST with an owner header that is not UTF-8 (no client library sends one)."""
    url = urlparse(base)
    payload = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(
        b"POST /api/invocations HTTP/1.1\r\nHost: tether\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nX-Forwarded-Email: " + owner + b"\r\n"
        b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
    )
    await writer.drain()
    response = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, content = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(content)


async def test_forty_good_posts_beside_ten_bad_ones_are_all_accepted(api: Api) -> None:
    good: list[dict[str, Any]] = [
        {"id": new_id(), "input": None if n % 8 == 0 else {"output": n}, "background": True}
        for n in range(40)
    ]
    owners = [b"ann\xff@example.com", b"bob\xc3@example.com"]  # refused at the edge
    unreadable_owners: list[dict[str, Any]] = [
        {"id": new_id(), "input": 1, "background": True} for _ in owners
    ]
    results = await asyncio.gather(
        *(api.post(body) for body in good),
        *(api.post_raw(body) for body in bad_bodies()),
        *(
            post_as_raw_owner(api.base, o, b)
            for o, b in zip(owners, unreadable_owners, strict=True)
        ),
    )
    assert [status for status, _ in results[:40]] == [202] * 40
    for status, body, *_ in results[40:]:
        assert status in (400, 422) and body["error"]["code"] == "invalid_request", body
        assert body["detail"] == body["error"]["message"]
    for status, _, *_ in results[-2:]:  # an identity that is not UTF-8: 400 before any batch
        assert status == 400
    for body in unreadable_owners:
        assert (await api.get(body["id"]))[0] == 404  # nothing stored for it
    for n, body in enumerate(good):
        done = await api.wait_status(body["id"], {"completed"})
        assert done["attempt"] == 1
        assert done["output"]["output"] == (None if n % 8 == 0 else n)


async def test_each_bad_body_alone_is_a_4xx_in_the_one_error_shape(api: Api) -> None:
    for raw in bad_bodies():
        status, body, _ = await api.post_raw(raw)
        assert status in (400, 422) and body["error"]["code"] == "invalid_request", raw
        assert set(body) == {"error", "detail"}


async def test_a_run_with_an_unstorable_output_fails_alone_and_once(api: Api) -> None:
    bodies: list[dict[str, Any]] = [
        {"id": new_id(), "input": {"output": n}, "background": True} for n in range(20)
    ]
    bad: dict[str, Any] = {"id": new_id(), "input": {"unstorable": True}, "background": True}
    results = await asyncio.gather(*(api.post(body) for body in [*bodies, bad]))
    assert {status for status, _ in results} == {202}
    failed = await api.wait_status(bad["id"], {"completed", "failed"})
    assert failed["status"] == "failed" and failed["attempt"] == 1
    assert failed["error"]["code"] == "invalid_output"
    for n, body in enumerate(bodies):
        done = await api.wait_status(body["id"], {"completed", "failed"})
        assert done["status"] == "completed" and done["attempt"] == 1
        assert done["output"]["output"] == n
