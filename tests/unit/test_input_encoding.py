"""An accepted input is encoded once: the canonical text its request hash covers is the text its
row stores. In process, on the embedded store as ``tether dev`` serves it."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, NoReturn

import aiohttp
import pytest
import sqlalchemy as sa

from tests.inprocess import served
from tether.gateway.keys import SERVICES
from tether.jsonvalue import JsonText, canonical, request_hash
from tether.store.errors import ValueRefused
from tether.store.invocations import storable
from tether.store.schema import NewInvocation, invocations


def not_again(value: Any) -> NoReturn:
    raise AssertionError("the input was encoded a second time")


def new(value: Any, text: str, hashed: str = "h") -> NewInvocation:
    return NewInvocation(str(uuid.uuid4()), "ann", None, value, hashed, input_text=text)


def test_the_hashed_text_is_the_stored_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tether.store.invocations.encoded", not_again)
    value = {"b": [1, {"d": None, "c": "é"}], "a": True}
    text = canonical(value)
    ready = storable(new(value, text, request_hash(text, None)))
    assert isinstance(ready, NewInvocation) and isinstance(ready.input, JsonText)
    assert ready.input == canonical(value) and ready.input_text is None


@pytest.mark.parametrize("value", [{"k": "nul\x00"}, ["half an emoji \ud83d"]])
def test_a_hashed_text_is_refused_as_an_input_is(value: Any) -> None:
    """The gateway's parser refuses both first (a lone surrogate could not be hashed); the store
    checks the text all the same."""
    refused = storable(new(value, canonical(value)))
    plain = storable(NewInvocation(str(uuid.uuid4()), "ann", None, value, "h"))
    assert isinstance(refused, ValueRefused) and isinstance(plain, ValueRefused)
    assert refused.public_message == plain.public_message
    assert refused.public_message.startswith("input: ")


async def test_a_post_stores_the_canonical_text_and_a_reordered_retry_is_the_same_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tether.store.invocations.encoded", not_again)
    invocation_id = str(uuid.uuid4())
    sent = {"id": invocation_id, "background": True, "input": {"z": 1, "a": {"y": 2, "b": 3}}}
    retried = {**sent, "input": {"a": {"b": 3, "y": 2}, "z": 1}}
    async with served(tmp_path) as server, aiohttp.ClientSession() as http:
        url = f"{server.base}/api/invocations"
        async with http.post(url, json=sent) as first, http.post(url, json=retried) as again:
            assert (first.status, again.status) == (202, 202)
            assert (await first.json())["id"] == (await again.json())["id"] == invocation_id
        store = server.app[SERVICES].store
        async with store.engine.connect() as conn:
            column = sa.type_coerce(invocations.c.input, sa.Text)
            query = sa.select(column).where(invocations.c.id == invocation_id)
            stored = await conn.scalar(query)
    assert stored == '{"a":{"b":3,"y":2},"z":1}'
