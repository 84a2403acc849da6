"""The app the contract and fault tests run: its behaviour is chosen by the input.

Input keys (all optional): ``emit`` (number of ``tick`` events), ``sleep`` (seconds to await
before returning), ``block_sleep`` (seconds of time.sleep, blocking the loop), ``fail`` (raise
with a secret message), ``output`` (what to return), ``nan`` (return NaN), ``wait_cancel`` (await
forever), ``bad_event`` (emit a reserved event type). Durable execution: ``step`` (run a step of
that name, which emits ``step.ran`` when its function really runs), ``durable_sleep`` (seconds of
ctx.sleep), ``wait`` (a wait name: the output carries the input value, or ``timed_out``),
``wait_timeout`` (its timeout).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tether import AgentApp, InvocationContext, WaitTimeout

app = AgentApp(name="contract")
no_recover_app = AgentApp(name="contract-no-recover")

SECRET = "db password is hunter2"


async def durably(spec: dict[str, Any], ctx: InvocationContext) -> dict[str, Any]:
    done: dict[str, Any] = {}
    if spec.get("step"):

        async def ran() -> int:
            await ctx.emit({"type": "step.ran", "attempt": ctx.attempt})
            return ctx.attempt

        done["step_attempt"] = await ctx.step(str(spec["step"]), ran)
    if spec.get("durable_sleep"):
        await ctx.sleep(float(spec["durable_sleep"]))
    if spec.get("wait"):
        timeout = spec.get("wait_timeout")
        try:
            done["value"] = await ctx.wait_for_input(
                str(spec["wait"]),
                prompt="value?",
                timeout=None if timeout is None else float(timeout),
            )
        except WaitTimeout:
            done["timed_out"] = True
    return done


async def behave(input: Any, ctx: InvocationContext) -> Any:
    spec = input if isinstance(input, dict) else {}
    durable = await durably(spec, ctx)
    for i in range(int(spec.get("emit", 0))):
        await ctx.emit({"type": "tick", "i": i, "attempt": ctx.attempt})
        if spec.get("emit_sleep"):
            await asyncio.sleep(float(spec["emit_sleep"]))
    if spec.get("bad_event"):
        await ctx.emit({"type": "run.completed"})
    if spec.get("block_sleep"):
        time.sleep(float(spec["block_sleep"]))  # noqa: ASYNC251 (blocks the loop on purpose)
    if spec.get("sleep"):
        await asyncio.sleep(float(spec["sleep"]))
    if spec.get("wait_cancel"):
        await asyncio.Event().wait()
    if spec.get("fail"):
        raise RuntimeError(SECRET)
    if spec.get("nan"):
        return float("nan")
    return {
        "output": spec.get("output", input),
        "attempt": ctx.attempt,
        "recovered": ctx.is_recovery,
        **durable,
    }


app.invoke(behave)
app.recover(behave)
no_recover_app.invoke(behave)
