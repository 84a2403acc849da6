"""When an attempt stops replaying: only after everything a replay reaches. What ran inside a
recorded step, and the budget waits before a recorded model call, are never reached again, so
they must not keep the attempt replaying (its later events would go unstored)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_durable import Sink, attempt
from tether.budgets import Verdict
from tether.context import InvocationContext
from tether.durable import DurableUsageError, Suspend
from tether.usage import ModelUsage


class Meter:
    """A budget that is spent until ``allow`` is set."""

    def __init__(self) -> None:
        self.allow = False

    async def check(self) -> Verdict:
        return Verdict() if self.allow else Verdict("tokens_per_period", True, 60.0)

    async def record(self, usage: ModelUsage) -> None:
        return None


def kinds(sink: Sink) -> list[str]:
    return [e["type"] for e in sink.events]


async def test_a_step_called_inside_a_step_is_part_of_it_and_later_events_are_stored() -> None:
    sink, inner_runs = Sink(), []

    async def handler(ctx: InvocationContext) -> Any:
        async def inner() -> tuple[int, int]:
            inner_runs.append(ctx.attempt)
            return (1, 2)

        async def outer() -> Any:
            return {"inner": await ctx.step("inner", inner)}

        got = await ctx.step("outer", outer)
        await ctx.emit({"type": "before_wait"})
        value = await ctx.wait_for_input("w")
        await ctx.emit({"type": "after_wait"})
        return got, value

    with pytest.raises(Suspend):
        await handler(attempt(sink, 1))
    assert set(sink.steps) == {"outer"}  # the inner call is recorded with its outer step
    sink.resolve("w", 5)
    assert await handler(attempt(sink, 2)) == ({"inner": [1, 2]}, 5)
    assert kinds(sink) == ["before_wait", "after_wait"]
    assert inner_runs == [1]


async def test_a_step_cannot_park() -> None:
    sink = Sink()
    ctx = attempt(sink, 1)

    async def waits() -> Any:
        return await ctx.wait_for_input("inside")

    async def sleeps() -> None:
        await ctx.sleep(60)  # past the inline limit: it would park

    for name, fn in (("a", waits), ("b", sleeps)):
        with pytest.raises(DurableUsageError, match=f"inside step '{name}'"):
            await ctx.step(name, fn)
    assert sink.parks == []


async def test_budget_waits_before_a_recorded_model_call_do_not_keep_the_attempt_replaying() -> (
    None
):
    sink, meter = Sink(), Meter()

    async def handler(ctx: InvocationContext) -> Any:
        await ctx.admit_model_call("m1")
        answer = await ctx.step("m1", lambda: "model says hi")
        await ctx.emit({"type": "before_w"})
        value = await ctx.wait_for_input("w")
        await ctx.emit({"type": "after_w"})
        return answer, value

    with pytest.raises(Suspend):  # parks on the spent budget
        await handler(attempt(sink, 1, usage=meter))
    (budget_wait,) = sink.parks[0]
    sink.resolve(budget_wait.name)
    meter.allow = True
    with pytest.raises(Suspend):  # the call made, then parks on w
        await handler(attempt(sink, 2, usage=meter))
    sink.resolve("w", 7)
    assert await handler(attempt(sink, 3, usage=meter)) == ("model says hi", 7)
    assert kinds(sink) == ["before_w", "after_w"]


@pytest.mark.parametrize("seconds", [float("inf"), float("nan"), 1e12])
async def test_a_sleep_or_timeout_no_clock_can_show_is_refused(seconds: float) -> None:
    sink = Sink()
    ctx = attempt(sink, 1)
    with pytest.raises(DurableUsageError, match="sleep"):
        await ctx.sleep(seconds)
    with pytest.raises(DurableUsageError, match="timeout"):
        await ctx.wait_for_input("w", timeout=seconds)
    assert sink.parks == []


async def test_a_wait_inside_a_task_group_parks_as_one_suspend() -> None:
    """The runtime ends such an attempt as parked, not with a group nobody retrieves."""
    import asyncio

    from tether.durable import ungrouped_parks

    ctx = attempt(Sink(), 1)

    async def handler() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(ctx.wait_for_input("a"))

    with pytest.raises(Suspend):
        await ungrouped_parks(handler())

    async def fails() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(ctx.wait_for_input("b"))
            group.create_task(asyncio.sleep(0, result=1 / 0))

    with pytest.raises(BaseExceptionGroup):
        await ungrouped_parks(fails())
