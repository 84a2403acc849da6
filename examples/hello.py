"""The example app `tether dev` serves when no --app is given: a few events, then a result.

Input: anything; a JSON object may set ``"steps"`` (how many status events, default 3) and
``"delay"`` (seconds between them, default 0.2).
"""

from __future__ import annotations

import asyncio
from typing import Any

from tether import AgentApp, InvocationContext

app = AgentApp(name="hello")


def _options(input: Any) -> tuple[int, float]:
    if isinstance(input, dict):
        return int(input.get("steps", 3)), float(input.get("delay", 0.2))
    return 3, 0.2


@app.invoke
async def invoke(input: Any, ctx: InvocationContext) -> Any:
    steps, delay = _options(input)
    for step in range(1, steps + 1):
        await ctx.emit({"type": "status", "message": f"working on step {step} of {steps}"})
        await asyncio.sleep(delay)
    return {"echo": input, "steps": steps}


@app.recover
async def recover(input: Any, ctx: InvocationContext) -> Any:
    """After a crash, simply run again: this example has no side effects to protect."""
    await ctx.emit({"type": "status", "message": f"recovering (attempt {ctx.attempt})"})
    return await invoke(input, ctx)
