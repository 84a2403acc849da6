"""An agent's memory across the invocations of one session (``ctx.thread``, spec §4.10).

The earlier turns are read in a durable step, so every attempt of an invocation sees the same
history. The turn's own messages go to the thread in two more steps: its user messages before the
run (so a turn that waits, fails or is cancelled still shows what was asked) and its final answer
after it, which never recreates a thread deleted meanwhile. Tool messages are not kept, as in the
reference. An ephemeral agent's thread is deleted after its turn instead, whether it answered or
failed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tether import InvocationContext, ThreadTurn
from tether.agents.definitions import AgentDefinition
from tether.agents.types import Message

log = logging.getLogger(__name__)
HISTORY_STEP = "thread.history"  # agent step names always hold '#': these never collide
ASKED_STEP = "thread.asked"
SAVE_STEP = "thread.save"


async def begin(
    ctx: InvocationContext, agent: AgentDefinition, asked: Sequence[Message]
) -> list[Message]:
    """The session's earlier turns, oldest first, once this turn's own messages are in its
    thread (none without a session, or for an ephemeral agent)."""
    thread = ctx.thread
    if thread is None or agent.ephemeral:
        return []

    async def read() -> list[dict[str, Any]]:
        return [{"role": t.role, "content": t.content} for t in await thread.history()]

    async def write() -> None:
        await thread.append([_turn(m) for m in asked])

    turns = await ctx.step(HISTORY_STEP, read)
    await ctx.step(ASKED_STEP, write)
    earlier = [
        Message("assistant" if t["role"] == "assistant" else "user", t["content"]) for t in turns
    ]
    while earlier and earlier[0].role == "assistant":  # an answer whose question was trimmed:
        earlier.pop(0)  # many chat APIs refuse a conversation that opens with the assistant
    return earlier


async def remember(
    ctx: InvocationContext, agent: AgentDefinition, asked: Sequence[Message], answer: str
) -> None:
    """Add this turn's answer to its session's thread, unless the thread was deleted during
    the turn (or forget the thread of an ephemeral agent)."""
    thread = ctx.thread
    if thread is None:
        return

    async def save() -> None:
        if agent.ephemeral:
            await thread.delete()
        elif answer:
            answered = [ThreadTurn("assistant", answer)]
            await thread.append(answered, start=len(asked), create=False)

    await ctx.step(SAVE_STEP, save)


async def forget_after_failure(ctx: InvocationContext, agent: AgentDefinition) -> None:
    """An ephemeral agent's thread goes after a failed turn too (spec §4.11 P25); another
    agent's keeps what was asked. A delete that fails is logged and left: the turn's own error
    is what the run ends with (the reference swallows it too). An attempt another replaced
    may delete before its fenced record is refused: harmless, since an ephemeral turn never
    reads its thread and its winner deletes it as well."""
    if ctx.thread is None or not agent.ephemeral:
        return
    try:
        await ctx.step(SAVE_STEP, ctx.thread.delete)
    except Exception as exc:  # noqa: BLE001 (the turn's own error stands)
        log.warning(
            "invocation %s: its ephemeral thread was not deleted (%s)",
            ctx.invocation_id,
            type(exc).__name__,
        )


def _turn(message: Message) -> ThreadTurn:
    return ThreadTurn("user" if message.role == "user" else "assistant", message.content)
