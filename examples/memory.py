"""A handler with memory: each invocation of a session sees the notes of the ones before it.

    tether dev --app examples.memory:app

Input: a note, as a string. Invocations that share a ``session_id`` share a thread
(``ctx.thread``, see docs/agents.md "Threads and memory"); each one answers with every note of
its session so far. Read the thread with ``GET /api/agents/threads/{session_id}`` and forget it
with ``DELETE``. The handler writes the note as it starts and its answer as it ends, each in a
durable step, so an attempt that replays after a crash writes nothing twice; the answer never
brings back a thread deleted while the invocation ran.
"""

from __future__ import annotations

from typing import Any

from tether import AgentApp, InvocationContext, SessionThread, ThreadTurn

app = AgentApp(name="notes")


async def earlier_notes(thread: SessionThread) -> list[str]:
    """The notes of the session's earlier invocations, oldest first."""
    return [turn.content for turn in await thread.history() if turn.role == "user"]


@app.invoke
async def handle(input: Any, ctx: InvocationContext) -> Any:
    note = str(input)
    thread = ctx.thread
    if thread is None:  # no session_id: nothing to remember
        return {"notes": [note]}
    before = await ctx.step("history", earlier_notes, thread)
    asked = [ThreadTurn("user", note)]
    await ctx.step("asked", thread.append, asked)
    notes = [*before, note]
    answer = "Notes so far: " + "; ".join(notes)
    answered = [ThreadTurn("assistant", answer)]
    # The answer's append may not create the thread: a DELETE meanwhile stays deleted.
    await ctx.step("answered", thread.append, answered, start=len(asked), create=False)
    return {"notes": notes, "answer": answer}


app.recover(handle)
