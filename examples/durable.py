"""A durable handler: an order that waits for a person's approval, then for its delivery date.

    tether dev --app examples.durable:app

Input: ``{"item": "laptop", "amount": 1200, "ship_in": 10}`` (``ship_in``: seconds until the
order ships, default 10). The run quotes the order (a step), parks until someone posts an
approval (``POST /api/invocations/{id}/input`` with ``{"wait": "approval", "value":
{"approved": true}}``), places the order (a step whose idempotency key is ``ctx.step_key``),
parks again on a durable sleep until it ships, and returns the order. While it waits it holds no
worker; whatever restarts in between, it resumes from its record (see docs/durable.md).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from tether import AgentApp, InvocationContext, WaitTimeout

app = AgentApp(name="durable-orders")

APPROVAL_TIMEOUT = 24 * 3600.0


def _order(input: Any) -> tuple[str, float, float]:
    spec = input if isinstance(input, dict) else {}
    return (
        str(spec.get("item", "laptop")),
        float(spec.get("amount", 100)),
        float(spec.get("ship_in", 10)),
    )


async def quote(ctx: InvocationContext, item: str, amount: float) -> dict[str, Any]:
    """A pretend pricing call. Steps run again if a crash cuts them short, so anything with an
    effect outside Tether takes ``ctx.step_key`` as its idempotency key."""
    return {"item": item, "amount": amount, "tax": round(amount * 0.2, 2), "quote": ctx.step_key}


async def place_order(ctx: InvocationContext, quoted: dict[str, Any]) -> dict[str, Any]:
    """A pretend supplier call. A real one would send ``ctx.step_key`` as its idempotency key
    (an ``Idempotency-Key`` header, say), so the retry after a crash cannot order twice."""
    order_id = "ord-" + hashlib.sha256(ctx.step_key.encode()).hexdigest()[:12]
    return {"order_id": order_id, **quoted}


@app.invoke
async def handle(input: Any, ctx: InvocationContext) -> Any:
    """Runs from the top on every attempt; recorded steps and resolved waits replay at once."""
    item, amount, ship_in = _order(input)
    # Code between steps must be deterministic: a clock, a random number or a remote read goes
    # through a step, so every replay sees the value the first run saw.
    requested_at = await ctx.step("requested_at", time.time)
    quoted = await ctx.step("quote", quote, ctx, item, amount)
    await ctx.emit({"type": "status", "message": f"waiting for approval of {item}"})
    try:
        approval = await ctx.wait_for_input(
            "approval",
            prompt=f"Approve buying {item} for {amount:g}?",
            timeout=APPROVAL_TIMEOUT,
            details={"quote": quoted},
        )
    except WaitTimeout:
        return {"status": "expired", "requested_at": requested_at}
    if not (isinstance(approval, dict) and approval.get("approved") is True):
        return {"status": "rejected", "requested_at": requested_at}
    order = await ctx.step("order", place_order, ctx, quoted)
    await ctx.emit({"type": "status", "message": f"ordered {order['order_id']}"})
    await ctx.sleep(ship_in)  # durable: longer than timers.inline_sleep_max, it parks
    return {"status": "shipped", "order": order, "requested_at": requested_at}


app.recover(handle)  # a replacement after a crash replays the same record
