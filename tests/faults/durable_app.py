"""The durable fault tests' app: steps whose side effects the test can count, a wait or a durable
sleep between them, and places where an attempt holds still until the test kills its process.

Input (a JSON object; every key optional):

- ``effects``: a file path. Every real run of a step function appends one fsynced line
  ``<ctx.step_key> <ctx.attempt> <pid>`` to it before doing anything else, so the test counts
  side effects across processes and restarts (a replayed step appends nothing).
- ``wait``: the name of an input wait between the ``charge`` and ``ship`` steps.
- ``sleep``: seconds of ``ctx.sleep`` between them.
- ``hold``: where an attempt that is not a crash replacement stops and waits to be killed:
  ``"in_charge"`` (in the ``charge`` step, after its side effect: the step's record is never
  written), ``"after_charge"`` (after the ``charge`` step was recorded) or ``"in_ship"`` (in the
  ``ship`` step, after its side effect: in the attempt the input or the timer resumed).
- ``go``: a file path; a holding attempt goes on once the file exists (else it holds forever).

After the ``charge`` step, every attempt emits ``charged {attempt}``.

Output: ``{"charge", "ship"}`` (what each step returned: its key and the attempt that really ran
it), ``value`` (the input, or None), ``attempt`` and ``recovered``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tether import AgentApp, InvocationContext

app = AgentApp(name="durable-faults")

HOLD_POINTS = ("in_charge", "after_charge", "in_ship")


def append_line(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_effects(path: str) -> list[tuple[str, int, int]]:
    """The side effects recorded in ``path``: (step key, attempt, pid), in order."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        rows = [line.split() for line in handle.read().splitlines() if line.strip()]
    return [(key, int(attempt), int(pid)) for key, attempt, pid in rows]


async def hold(go: str | None) -> None:
    """Until the file ``go`` exists (the test's signal), or until the process is killed."""
    if go is None:
        await asyncio.Event().wait()
    for _ in range(int(300 / 0.05)):  # polling a file: the signal crosses processes
        if await asyncio.to_thread(os.path.exists, str(go)):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{go} never appeared")


async def side_effect(
    ctx: InvocationContext, effects: str | None, holding: bool, go: str | None = None
) -> dict[str, Any]:
    """One step's work: the counted side effect (keyed by ``ctx.step_key``, as an idempotent
    external call would be), then optionally hold before the step's record is written."""
    if effects:
        await asyncio.to_thread(append_line, effects, f"{ctx.step_key} {ctx.attempt} {os.getpid()}")
    if holding:
        await hold(go)
    return {"key": ctx.step_key, "attempt": ctx.attempt}


@app.invoke
async def run(input: Any, ctx: InvocationContext) -> Any:
    spec = input if isinstance(input, dict) else {}
    effects, go = spec.get("effects"), spec.get("go")
    where = spec.get("hold") if not ctx.is_recovery else None
    charge = await ctx.step("charge", side_effect, ctx, effects, where == "in_charge", go)
    await ctx.emit({"type": "charged", "attempt": ctx.attempt})
    if where == "after_charge":
        await hold(go)
    value = None
    if spec.get("wait"):
        value = await ctx.wait_for_input(str(spec["wait"]), prompt="value?")
    if spec.get("sleep"):
        await ctx.sleep(float(spec["sleep"]))
    ship = await ctx.step("ship", side_effect, ctx, effects, where == "in_ship", go)
    return {
        "charge": charge,
        "ship": ship,
        "value": value,
        "attempt": ctx.attempt,
        "recovered": ctx.is_recovery,
    }


app.recover(run)
