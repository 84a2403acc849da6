"""The app of the randomized invariant harness (tests/contract/test_invariants.py): each input
carries a plan the handler follows, one operation after the other.

Input: ``{"plan": [[op, arg], ...], "effects": <file path>, "tag": <anything>}``; ops:

- ``["emit", n]``: n ``tick`` events;
- ``["step", _]``: a step whose function appends ``<invocation id> <step key>`` to ``effects``
  (fsynced), so the harness counts the step functions that really ran;
- ``["sleep", s]``: ``ctx.sleep(s)`` (parks past ``timers.inline_sleep_max``);
- ``["wait", t]``: ``ctx.wait_for_input(f"w{i}")``, ``i`` the op's index, with a timeout of
  ``t`` seconds unless ``t`` is 0 (a timed out wait's value is ``TIMED_OUT``);
- ``["pause", s]``: ``asyncio.sleep(s)``, a window for cancels and stream reads;
- ``["fail", _]``: raise, with a message no client may see.

Output: ``{"values": [what each wait returned], "steps": [what each step returned]}``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tether import AgentApp, InvocationContext, WaitTimeout

app = AgentApp(name="fuzz")

SECRET = "fuzz secret: do not leak"
TIMED_OUT = {"timed_out": True}


def append_line(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


async def effect(ctx: InvocationContext, effects: str | None) -> str:
    if effects:
        await asyncio.to_thread(append_line, effects, f"{ctx.invocation_id} {ctx.step_key}")
    return ctx.step_key


async def run(input: Any, ctx: InvocationContext) -> Any:
    spec = input if isinstance(input, dict) else {}
    effects = spec.get("effects")
    values: list[Any] = []
    steps: list[Any] = []
    for i, (op, arg) in enumerate(spec.get("plan", [])):
        if op == "emit":
            for n in range(int(arg)):
                await ctx.emit({"type": "tick", "op": i, "n": n})
        elif op == "step":
            steps.append(await ctx.step(f"s{i}", effect, ctx, effects))
        elif op == "sleep":
            await ctx.sleep(float(arg))
        elif op == "wait":
            try:
                timeout = float(arg) if arg else None
                values.append(await ctx.wait_for_input(f"w{i}", prompt="?", timeout=timeout))
            except WaitTimeout:
                values.append(TIMED_OUT)
        elif op == "pause":
            await asyncio.sleep(float(arg))
        elif op == "fail":
            raise RuntimeError(SECRET)
    return {"values": values, "steps": steps}


app.invoke(run)
app.recover(run)
