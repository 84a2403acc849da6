"""Who may claim to be whom, against `tether dev` and a real gateway with workers.

The servers trust 127.0.0.1 as their proxy (tests/procs.py: LOOPBACK_PROXY_AUTH). A client that
connects from 127.0.0.2, another loopback address, is a stranger that is not that proxy.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from tests.client import Api, new_id

STRANGER_ADDRESS = "127.0.0.2"


@pytest.fixture
async def stranger(api: Api) -> AsyncIterator[aiohttp.ClientSession]:
    """A session whose connections come from 127.0.0.2."""
    probe = socket.socket()
    try:
        probe.bind((STRANGER_ADDRESS, 0))
    except OSError:
        pytest.skip(f"cannot bind {STRANGER_ADDRESS} on this machine")
    finally:
        probe.close()
    connector = aiohttp.TCPConnector(local_addr=(STRANGER_ADDRESS, 0))
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


async def raw_post(base: str, header: bytes) -> tuple[int, Any]:
    """POST /api/invocations with one header line as raw bytes."""
    url = urlsplit(base)
    payload = json.dumps({"id": new_id(), "input": 1}).encode()
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(
        b"POST /api/invocations HTTP/1.1\r\nHost: tether\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\n" + header + b"\r\n"
        b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
    )
    response = await reader.read()
    writer.close()
    head, _, content = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(content)


async def test_an_identity_claimed_from_an_untrusted_address_is_refused(
    api: Api, stranger: aiohttp.ClientSession
) -> None:
    invocation_id = new_id()
    await api.post({"id": invocation_id, "input": 1})
    spoofer = Api(stranger, api.base, owner=api.owner)
    status, body = await spoofer.post({"id": new_id(), "input": 1})
    assert status == 401 and body["error"]["code"] == "unauthenticated"
    assert body["detail"] == body["error"]["message"]
    assert (await spoofer.get(invocation_id))[0] == 401
    assert (await spoofer.cancel(invocation_id))[0] == 401
    assert (await api.get(invocation_id))[1]["status"] == "completed"


async def test_the_trusted_proxy_address_speaks_for_its_users(api: Api) -> None:
    invocation_id = new_id()
    status, _ = await api.post({"id": invocation_id, "input": 1})
    assert status == 200
    assert (await Api(api.session, api.base).get(invocation_id))[0] == 404


async def test_a_request_without_identity_is_refused_not_anonymous(api: Api) -> None:
    async with api.session.post(
        f"{api.base}/api/invocations", json={"id": new_id(), "input": 1}
    ) as r:
        assert r.status == 401 and (await r.json())["error"]["code"] == "unauthenticated"


async def test_an_over_long_identity_is_a_400_never_a_shortened_owner(api: Api) -> None:
    status, body = await Api(api.session, api.base, owner="x" * 257).post(
        {"id": new_id(), "input": 1}
    )
    assert status == 400 and body["error"]["code"] == "invalid_request"


async def test_identity_bytes_that_are_not_utf8_are_a_400_and_spoil_no_batch(api: Api) -> None:
    good = [Api(api.session, api.base).post({"id": new_id(), "input": i}) for i in range(6)]
    bad = raw_post(api.base, b"X-Forwarded-Email: \xffoo@example.com")
    *answers, (status, body) = await asyncio.gather(*good, bad)
    assert status == 400 and body["error"]["code"] == "invalid_request"
    assert [s for s, _ in answers] == [200] * 6
