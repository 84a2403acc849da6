"""An agent's memory across the invocations of one session (``ctx.thread``, spec §4.10).

The earlier turns are read in a durable step, so every attempt of an invocation sees the same
history, and the invocation's own turns (its user messages and the final answer; tool messages
are not kept, as in the reference) are appended in another, once. An ephemeral agent's thread is
deleted after its turn instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether import InvocationContext, ThreadTurn
from tether.agents.definitions import AgentDefinition
from tether.agents.types import Message

HISTORY_STEP = "thread.history"  # agent step names always hold '#': these never collide
SAVE_STEP = "thread.save"


async def history(ctx: InvocationContext, agent: AgentDefinition) -> list[Message]:
    """The session's earlier turns, oldest first (none without a session, or for an ephemeral
    agent)."""
    thread = ctx.thread
    if thread is None or agent.ephemeral:
        return []

    async def read() -> list[dict[str, Any]]:
        return [{"role": t.role, "content": t.content} for t in await thread.history()]

    turns = await ctx.step(HISTORY_STEP, read)
    return [
        Message("assistant" if t["role"] == "assistant" else "user", t["content"]) for t in turns
    ]


async def remember(
    ctx: InvocationContext, agent: AgentDefinition, asked: Sequence[Message], answer: str
) -> None:
    """Append this invocation's turns to its session's thread (or forget the thread of an
    ephemeral agent)."""
    thread = ctx.thread
    if thread is None:
        return

    async def save() -> None:
        if agent.ephemeral:
            await thread.delete()
            return
        turns = [ThreadTurn("user" if m.role == "user" else "assistant", m.content) for m in asked]
        if answer:
            turns.append(ThreadTurn("assistant", answer))
        await thread.append(turns)

    await ctx.step(SAVE_STEP, save)
