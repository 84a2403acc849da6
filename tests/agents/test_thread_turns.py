"""When a turn's messages reach its thread (spec §4.10): the user message before the run, so a
turn that waits, fails or is cancelled still shows it, and the answer after it, never bringing
back a thread deleted during the turn."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.agents.agent_server import (
    ALICE,
    Counter,
    agent_app,
    chat,
    meta,
    parse_sse,
    registry,
    serve,
    text_of,
    until_pending,
    wait_for,
    wipe,
)
from tests.openapi_check import checked_trace
from tether.agents import AgentRegistry, ScriptedModel, build_agent_app, create_agent
from tether.agents.adapters.scripted import ScriptedTurn
from tether.agents.types import AgentInput, TurnItem
from tether.cli.compose import dev_app
from tether.gateway.keys import SERVICES
from tether.settings import load_settings
from tether.store.errors import StoreError
from tether.store.schema import invocations, thread_messages

pytestmark = pytest.mark.timeout(60)


class Broken:
    """A model whose every turn fails."""

    name = "broken"
    accepts_extensions: frozenset[str] = frozenset()
    consumes_input_tools = True

    async def turn(self, request: AgentInput) -> AsyncGenerator[TurnItem, None]:
        raise RuntimeError("the model is down")
        yield  # pragma: no cover - an async generator


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Any:
    base = registry(Counter())
    broken = create_agent("broken", "Fails.", model=Broken())
    fleeting = create_agent("fleeting", "Fails, keeping nothing.", model=Broken(), ephemeral=True)
    wiping = [ScriptedTurn(tool_calls=(("wipe", {}),)), ScriptedTurn("done")]
    vanishing = create_agent(
        "vanishing",
        "Wipes, keeping nothing.",
        model=ScriptedModel(wiping),
        tools=[wipe],
        ephemeral=True,
    )
    everyone = [*base.agents.values(), broken, fleeting, vanishing]
    agents = AgentRegistry.of(everyone, approval=base.approval)
    return await serve(aiohttp_client, tmp_path, build_agent_app(agents))


async def thread_messages_of(client: Any, thread: str) -> list[tuple[str, str]] | None:
    r = await client.get(f"/api/agents/threads/{thread}", headers=ALICE)
    if r.status == 404:
        return None
    return [(m["role"], m["content"]) for m in (await r.json())["messages"]]


async def status_of(client: Any, invocation_id: str) -> str:
    r = await client.get(f"/api/invocations/{invocation_id}", headers=ALICE)
    return str((await r.json())["status"])


async def parked_turn(
    client: Any, thread: str | None = None, agent: str = "wiper"
) -> tuple[str, str, Any]:
    """A turn of a wiping agent, waiting for the approval of its tool: (thread, stream, the
    open stream's response)."""
    body = {"message": "wipe it", "agent": agent}
    if thread is not None:
        body["threadId"] = thread
    stream = await client.post("/api/agents/chat", json=body, headers=ALICE)
    opened = parse_sse((await stream.content.readuntil(b"\n\n")).decode())
    thread = str(meta(opened)["threadId"])
    pending = await until_pending(stream)

    async def waiting() -> bool:
        return await status_of(client, pending["stream_id"]) == "waiting"

    await wait_for(waiting)
    return thread, pending["stream_id"], {**pending, "response": stream}


async def test_a_waiting_turn_shows_what_was_asked_and_a_cancelled_one_keeps_it(
    client: Any,
) -> None:
    thread, stream_id, pending = await parked_turn(client)
    assert await thread_messages_of(client, thread) == [("user", "wipe it")]
    await client.post("/api/agents/cancel", json={"streamId": stream_id}, headers=ALICE)
    assert await status_of(client, stream_id) == "cancelled"
    assert await thread_messages_of(client, thread) == [("user", "wipe it")]
    rest = parse_sse(await pending["response"].text())  # the user's abort ends it silently
    assert not [f for f in rest if f["event"] in ("error", "response.failed")], rest


async def test_a_failed_turn_keeps_what_was_asked_and_the_next_turn_sees_it(
    client: Any,
) -> None:
    code, frames = await chat(client, "first", agent="broken")
    assert code == 200 and frames[-1]["event"] == "response.failed"
    thread = meta(frames)["threadId"]
    assert await thread_messages_of(client, thread) == [("user", "first")]
    _, frames = await chat(client, "second", threadId=thread)
    assert text_of(frames) == "first|second"  # the next turn's history holds it
    assert await thread_messages_of(client, thread) == [
        ("user", "first"),
        ("user", "second"),
        ("assistant", "first|second"),
    ]


async def test_a_thread_deleted_during_a_turn_stays_deleted(client: Any) -> None:
    thread, stream_id, pending = await parked_turn(client)
    r = await client.delete(f"/api/agents/threads/{thread}", headers=ALICE)
    assert r.status == 200
    approve = {"streamId": stream_id, "approvalId": pending["approval_id"], "decision": "approve"}
    assert (await client.post("/api/agents/approve", json=approve, headers=ALICE)).status == 200

    async def completed() -> bool:
        return await status_of(client, stream_id) == "completed"

    await wait_for(completed)
    assert await thread_messages_of(client, thread) is None
    store = client.app[SERVICES].store
    count = sa.select(sa.func.count()).select_from(thread_messages)
    async with store.engine.connect() as conn:
        assert (
            await conn.execute(count.where(thread_messages.c.thread_id == thread))
        ).scalar() == 0


async def test_a_turn_queued_when_its_thread_is_deleted_does_not_start_it_again(
    client: Any,
) -> None:
    """The second turn waits behind the first (session order); the user deletes the thread;
    once the first is approved both run to the end, and neither writes to the thread."""
    thread, stream_id, pending = await parked_turn(client)
    body = {"message": "and then", "threadId": thread}
    queued = await client.post("/api/agents/chat", json=body, headers=ALICE)
    assert queued.status == 200
    store = client.app[SERVICES].store
    turns = await store.list_owned("alice", session_id=thread)
    assert sorted(t.status.value for t in turns) == ["queued", "waiting"]
    assert (await client.delete(f"/api/agents/threads/{thread}", headers=ALICE)).status == 200
    approve = {"streamId": stream_id, "approvalId": pending["approval_id"], "decision": "approve"}
    assert (await client.post("/api/agents/approve", json=approve, headers=ALICE)).status == 200
    frames = parse_sse(await queued.text())
    assert frames[-1]["event"] == "response.completed"

    async def both_completed() -> bool:
        turns = await store.list_owned("alice", session_id=thread)
        return [t.status.value for t in turns] == ["completed", "completed"]

    await wait_for(both_completed)
    assert await thread_messages_of(client, thread) is None


async def test_an_ephemeral_turn_that_fails_leaves_no_thread(client: Any) -> None:
    """Spec §4.11 P25: the thread goes after an error too. A new chat's thread is never
    written; an existing conversation the turn was sent to is deleted."""
    code, frames = await chat(client, "hello", agent="fleeting")
    assert code == 200 and frames[-1]["event"] == "response.failed"
    assert await thread_messages_of(client, meta(frames)["threadId"]) is None

    _, frames = await chat(client, "remember me")
    thread = meta(frames)["threadId"]
    assert await thread_messages_of(client, thread) is not None
    _, frames = await chat(client, "and forget", agent="fleeting", threadId=thread)
    assert frames[-1]["event"] == "response.failed"
    assert await thread_messages_of(client, thread) is None


async def test_a_cancelled_ephemeral_turn_deletes_the_thread_it_named(client: Any) -> None:
    """Spec §4.10: the thread goes in the stream's ``finally``, so after an abort too; a
    waiting turn runs no code when cancelled, so the cancel deletes it."""
    _, frames = await chat(client, "remember me")
    thread = meta(frames)["threadId"]
    _, stream_id, pending = await parked_turn(client, thread, agent="vanishing")
    assert await thread_messages_of(client, thread) is not None
    await client.post("/api/agents/cancel", json={"streamId": stream_id}, headers=ALICE)
    assert await status_of(client, stream_id) == "cancelled"
    assert await thread_messages_of(client, thread) is None
    rest = parse_sse(await pending["response"].text())
    assert not [f for f in rest if f["event"] in ("error", "response.failed")], rest


async def test_cancelling_a_turn_of_an_agent_no_longer_loaded_keeps_its_thread(
    client: Any,
) -> None:
    """A turn stored before a redeploy may name an agent the app no longer has: its cancel is
    the usual ``{"cancelled": true}`` (it was a 500 once the cancel had been applied), and the
    thread stays: nothing says that agent was ephemeral."""
    thread, stream_id, pending = await parked_turn(client)
    store = client.app[SERVICES].store
    gone = {"messages": "wipe it", "agent": "retired"}
    async with store.engine.begin() as conn:
        await conn.execute(
            sa.update(invocations).where(invocations.c.id == stream_id).values(input=gone)
        )
    r = await client.post("/api/agents/cancel", json={"streamId": stream_id}, headers=ALICE)
    assert r.status == 200 and await r.json() == {"cancelled": True}
    assert await status_of(client, stream_id) == "cancelled"
    assert await thread_messages_of(client, thread) == [("user", "wipe it")]
    await pending["response"].text()


async def test_an_ephemeral_turns_failed_delete_leaves_its_own_error_standing(
    client: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The delete after a failed turn is logged when it fails, and the turn ends with its own
    error (the model's), not the store's."""
    _, frames = await chat(client, "hello", agent="fleeting")
    [alone] = [f["data"]["error"] for f in frames if f["event"] == "error"]
    _, frames = await chat(client, "remember me")
    thread = meta(frames)["threadId"]
    store = client.app[SERVICES].store

    async def unavailable(*args: Any, **kwargs: Any) -> bool:
        raise StoreError("the database went away")

    monkeypatch.setattr(store.threads, "delete", unavailable)
    _, frames = await chat(client, "and forget", agent="fleeting", threadId=thread)
    assert frames[-1]["event"] == "response.failed"
    assert [f["data"]["error"] for f in frames if f["event"] == "error"] == [alone]
    assert "its ephemeral thread was not deleted (StoreError)" in caplog.text
    monkeypatch.undo()
    assert await thread_messages_of(client, thread) is not None


async def test_a_turn_says_it_completed_only_once_its_answer_is_in_its_thread(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer is written before the stream's ``response.completed`` (the reference
    persists it before ``finalize()``): a turn whose answer cannot be written fails, and its
    stream says so instead of having said it completed."""
    store = client.app[SERVICES].store
    append = store.threads.append

    async def unavailable(*args: Any, **kwargs: Any) -> bool:
        if kwargs.get("create") is False:  # the answer (a turn's user messages may create)
            raise StoreError("the database went away")
        return bool(await append(*args, **kwargs))

    monkeypatch.setattr(store.threads, "append", unavailable)
    _, frames = await chat(client, "hello")
    assert await status_of(client, meta(frames)["streamId"]) == "failed"
    assert [f["event"] for f in frames][-2:] == ["error", "response.failed"]
    monkeypatch.undo()
    _, frames = await chat(client, "hello again", threadId=meta(frames)["threadId"])
    assert frames[-1]["event"] == "response.completed"
    assert await thread_messages_of(client, meta(frames)["threadId"]) == [
        ("user", "hello"),
        ("user", "hello again"),
        ("assistant", "hello|hello again"),
    ]


async def test_a_trimmed_history_never_opens_with_an_answer_whose_question_was_trimmed(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """The thread keeps its newest ``max_thread_messages``, so the oldest kept may be an
    answer whose question was trimmed (an odd cap, as here, or an earlier turn without an
    answer): the model is not shown it (chat APIs such as Anthropic's refuse a conversation
    that opens with the assistant)."""
    counter = Counter()
    settings = load_settings(
        None,
        embedded_path=str(tmp_path / "trimmed.db"),
        agents={"max_thread_messages": 3},
        auth={"mode": "forwarded", "trusted_proxies": ["127.0.0.1"]},
    )
    client = await aiohttp_client(
        dev_app(settings, agent_app(counter)), trace_configs=[checked_trace()]
    )
    _, frames = await chat(client, "one")
    thread = meta(frames)["threadId"]
    _, frames = await chat(client, "two", threadId=thread)
    assert await thread_messages_of(client, thread) == [
        ("assistant", "one"),
        ("user", "two"),
        ("assistant", "one|two"),
    ]
    _, frames = await chat(client, "three", threadId=thread)
    shown = [(m.role, m.content) for m in counter.requests[-1].messages[1:]]
    assert shown == [("user", "two"), ("assistant", "one|two"), ("user", "three")]
    assert text_of(frames) == "two|three"
