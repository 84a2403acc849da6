"""The apps the benchmarks run: a no-op, a 2 s sleeper, an event emitter, a parker and an echo."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tether import AgentApp, InvocationContext

noop = AgentApp(name="bench-noop")
sleeper = AgentApp(name="bench-sleeper")
emitter = AgentApp(name="bench-emitter")
parker = AgentApp(name="bench-parker")
echo = AgentApp(name="bench-echo")
both = AgentApp(name="bench-peer")  # the peer scenario's: one server for every phase


@noop.invoke
async def do_nothing(input: Any, ctx: InvocationContext) -> Any:
    return None


@sleeper.invoke
async def simulated_model_call(input: Any, ctx: InvocationContext) -> Any:
    """Await ``input["seconds"]`` (default 2), as a handler awaiting a model would."""
    seconds = float(input.get("seconds", 2.0)) if isinstance(input, dict) else 2.0
    await asyncio.sleep(seconds)
    return {"slept": seconds}


@emitter.invoke
async def emit_events(input: Any, ctx: InvocationContext) -> Any:
    """Emit ``events`` (default 10,000) events, ``interval`` seconds apart (default 0), the
    first after ``offset`` seconds (so many streams can tick out of step).

    Each event carries ``t``, the wall-clock time it was emitted, so a client on the same machine
    can measure emit → receive latency.
    """
    spec = input if isinstance(input, dict) else {}
    count = int(spec.get("events", 10_000))
    interval = float(spec.get("interval", 0.0))
    if spec.get("offset"):
        await asyncio.sleep(float(spec["offset"]))
    for i in range(count):
        if interval:
            await asyncio.sleep(interval)
        await ctx.emit({"type": "tick", "i": i, "t": time.time()})
    return {"emitted": count}


@parker.invoke
async def park_durably(input: Any, ctx: InvocationContext) -> Any:
    """``{"sleep": s}``: a durable sleep of ``s`` seconds (parked when longer than
    ``timers.inline_sleep_max``); ``{"wait": true}``: park until input ``go`` arrives and return
    it; ``{}``: return at once (the no-op baseline)."""
    spec = input if isinstance(input, dict) else {}
    if spec.get("sleep"):
        await ctx.sleep(float(spec["sleep"]))
    if spec.get("wait"):
        return {"go": await ctx.wait_for_input("go")}
    return None


async def noop_or_ticks(input: Any, ctx: Any) -> Any:
    """A no-op, or ``events`` timestamped ticks ``interval`` s apart (the first ``offset`` s late)
    when the input asks for them.

    The peer scenario runs this very function in Tether (``both``) and in AgentKit's server
    (``bench/peer_app.py``): the two frameworks' contexts both have ``emit(event)``.
    """
    spec = input if isinstance(input, dict) else {}
    count = int(spec.get("events", 0))
    interval = float(spec.get("interval", 0.0))
    if spec.get("offset"):
        await asyncio.sleep(float(spec["offset"]))
    for i in range(count):
        if interval:
            await asyncio.sleep(interval)
        await ctx.emit({"type": "tick", "i": i, "t": time.time()})
    return {"emitted": count} if count else None


both.invoke(noop_or_ticks)


@echo.invoke
async def give_back(input: Any, ctx: InvocationContext) -> Any:
    """Its input, as its output: what a run that returns a large value costs."""
    return input
