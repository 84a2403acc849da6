"""The app the contract and fault tests run: its behaviour is chosen by the input.

Input keys (all optional): ``emit`` (number of ``tick`` events), ``pad`` (characters of filler
in each tick), ``sleep`` (seconds to await before returning), ``block_sleep`` (seconds of
time.sleep, blocking the loop), ``fail`` (raise with a secret message), ``output`` (what to
return), ``nan`` (return NaN), ``wait_cancel`` (await forever), ``bad_event`` (emit a reserved
event type).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tether import AgentApp, InvocationContext

app = AgentApp(name="contract")
no_recover_app = AgentApp(name="contract-no-recover")

SECRET = "db password is hunter2"


async def behave(input: Any, ctx: InvocationContext) -> Any:
    spec = input if isinstance(input, dict) else {}
    pad = {"pad": "x" * int(spec["pad"])} if spec.get("pad") else {}
    for i in range(int(spec.get("emit", 0))):
        await ctx.emit({"type": "tick", "i": i, "attempt": ctx.attempt, **pad})
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
    }


app.invoke(behave)
app.recover(behave)
no_recover_app.invoke(behave)
