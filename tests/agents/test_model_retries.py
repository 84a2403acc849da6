"""A model endpoint that says it is busy for now (429, 503, ...) is asked again, as its
``Retry-After`` says or after a backoff, a bounded number of times; any other error fails the
turn at once, and an abort or the adapter's deadline ends the waiting."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from collections.abc import AsyncIterator
from typing import TypeVar

import pytest
from databricks.sdk.config import Config

from tests.agents.conftest import FakeModelServer, chat_chunk
from tether.agents import Message, SupervisorAdapter, from_model_serving
from tether.agents.adapters import http
from tether.agents.errors import ModelError
from tether.agents.types import AgentInput, TurnOutcome

HELLO = [Message("user", "Hello")]
NOW = {"Retry-After": "0"}
HANG_GUARD = 30.0
"""Only so that a wait that never ends fails the test rather than hangs it; nothing is timed."""


async def test_a_busy_answer_is_waited_out_and_the_call_sent_again(
    server: FakeModelServer, config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=http.__name__)
    server.reply(status=429, headers=NOW)
    server.reply(status=503, headers=NOW)
    server.reply(chat_chunk("Hello"), "data: [DONE]\n\n")
    items = [i async for i in from_model_serving("ep", config=config).turn(AgentInput(HELLO))]
    assert items[-1] == TurnOutcome("Hello")
    assert len(server.requests) == 3
    assert server.requests[0].body == server.requests[2].body  # the same call, whole
    assert "/serving-endpoints/ep/invocations answered 429: sending again" in caplog.text
    assert "dapi0123" not in caplog.text


async def test_busy_answers_past_the_retries_fail_the_turn_with_their_status(
    server: FakeModelServer, config: Config
) -> None:
    for _ in range(http.MODEL_RETRIES + 1):
        server.reply(status=503, headers=NOW)
    server.reply(chat_chunk("never asked for"))
    with pytest.raises(ModelError, match=r"Databricks API error \(503\)"):
        [i async for i in from_model_serving("ep", config=config).turn(AgentInput(HELLO))]
    assert len(server.requests) == http.MODEL_RETRIES + 1


@pytest.mark.parametrize(
    ("status", "headers"),
    [(500, {}), (400, {}), (401, {}), (429, {"Retry-After": "3600"})],
    ids=["error", "refused", "unauthorized", "asks-for-an-hour"],
)
async def test_other_answers_fail_the_turn_at_once(
    server: FakeModelServer, config: Config, status: int, headers: dict[str, str]
) -> None:
    server.reply(status=status, headers=headers)
    server.reply(chat_chunk("never asked for"))
    with pytest.raises(ModelError, match=rf"Databricks API error \({status}\)"):
        [i async for i in from_model_serving("ep", config=config).turn(AgentInput(HELLO))]
    assert len(server.requests) == 1


async def test_the_supervisor_api_is_asked_again_too(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(status=429, headers=NOW)
    server.reply(status=500)
    with pytest.raises(ModelError, match=r"Supervisor API error \(transport\)"):
        [i async for i in SupervisorAdapter("m", config=config).turn(AgentInput(HELLO))]
    assert len(server.requests) == 2


async def test_an_abort_ends_the_wait_for_a_retry(server: FakeModelServer, config: Config) -> None:
    server.reply(status=429, headers={"Retry-After": "25"})
    server.reply(chat_chunk("never asked for"))
    signal = asyncio.Event()
    adapter = from_model_serving("ep", config=config)
    turn = asyncio.ensure_future(_drain(adapter.turn(AgentInput(HELLO, signal=signal))))
    async with asyncio.timeout(HANG_GUARD):
        await server.requested.wait()
        signal.set()
        await turn
    assert len(server.requests) == 1


async def test_the_deadline_ends_the_wait_for_a_retry(
    server: FakeModelServer, config: Config
) -> None:
    server.reply(status=429, headers={"Retry-After": "25"})
    adapter = from_model_serving("ep", config=config, timeout_s=0.2)
    async with asyncio.timeout(HANG_GUARD):
        with pytest.raises(ModelError, match=r"\(transport\)"):
            await _drain(adapter.turn(AgentInput(HELLO)))
    assert len(server.requests) == 1


def test_retry_after_in_seconds_or_as_a_date_else_a_backoff() -> None:
    assert http.retry_delay(0, "7") == 7.0
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 8.0 <= (http.retry_delay(0, in_ten) or 0) <= 10.0
    assert http.retry_delay(0, email.utils.formatdate(time.time() - 60, usegmt=True)) == 0.0
    assert http.retry_delay(0, str(int(http.MAX_RETRY_AFTER) + 1)) is None
    for retry, garbage in [(0, None), (1, "soon"), (2, "-3")]:
        base = http.FIRST_BACKOFF * 2**retry
        assert 0.5 * base <= (http.retry_delay(retry, garbage) or 0) <= 1.5 * base


T = TypeVar("T")


async def _drain(items: AsyncIterator[T]) -> list[T]:
    return [i async for i in items]
