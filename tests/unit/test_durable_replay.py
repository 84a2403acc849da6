"""When an attempt stops replaying: only after everything a replay reaches. What ran inside a
recorded step, and the budget waits before a recorded model call, are never reached again, so
they must not keep the attempt replaying (its later events would go unstored)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.unit.test_durable import Sink, attempt
from tether.budgets import Verdict
from tether.context import InvocationContext
from tether.durable import MAX_WAIT_SECONDS, DurableUsageError, Suspend, ungrouped_parks
from tether.store.errors import Superseded
from tether.store.journal import StepRecord
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


@pytest.mark.parametrize("seconds", [float("inf"), float("nan"), 1e12, 10**400, "5", True, [1]])
async def test_a_sleep_or_timeout_no_clock_can_show_is_refused(seconds: Any) -> None:
    """Not a number of seconds at all (a string from a JSON input, say) is refused alike: it
    was a TypeError of the comparison ("must be real number, not str")."""
    sink = Sink()
    ctx = attempt(sink, 1)
    with pytest.raises(DurableUsageError, match="sleep"):
        await ctx.sleep(seconds)
    with pytest.raises(DurableUsageError, match="timeout"):
        await ctx.wait_for_input("w", timeout=seconds)
    assert sink.parks == []


async def test_a_wait_inside_a_task_group_parks_as_one_suspend() -> None:
    """The runtime ends such an attempt as parked, not with a group nobody retrieves; a second
    wait of the group, refused (Superseded) once the first one parked the attempt, too."""
    ctx = attempt(Sink(), 1)

    async def handler() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(ctx.wait_for_input("a"))

    with pytest.raises(Suspend):
        await ungrouped_parks(handler())

    async def parked_then_refused() -> None:
        raise BaseExceptionGroup("two waits", [Suspend(), Superseded("inv-1")])

    with pytest.raises(Suspend):
        await ungrouped_parks(parked_then_refused())

    async def fails() -> None:
        async def boom() -> None:  # fails in the same turn of the loop as the wait parks
            raise ZeroDivisionError

        async with asyncio.TaskGroup() as group:
            group.create_task(ctx.wait_for_input("b"))
            group.create_task(boom())

    with pytest.raises(BaseExceptionGroup) as raised:
        await ungrouped_parks(fails())
    parks, rest = raised.value.split(Suspend)
    assert parks is not None and rest is not None and rest.split(ZeroDivisionError)[1] is None


async def test_a_step_an_earlier_version_recorded_inside_another_is_replayed() -> None:
    """Such a record counts as replayed (or the attempt would stay 'replaying' for good)."""
    sink, runs = Sink(), []
    sink.steps["charge"] = StepRecord("charge", {"charged": 1}, None)  # recorded alone

    async def handler(ctx: InvocationContext) -> Any:
        async def charge() -> dict[str, int]:
            runs.append(ctx.step_key)
            return {"charged": 2}

        async def outer() -> Any:
            return await ctx.step("charge", charge)

        got = await ctx.step("outer", outer)
        await ctx.emit({"type": "after"})
        return got

    assert await handler(attempt(sink, 2)) == {"charged": 1}
    assert runs == [] and kinds(sink) == ["after"]


async def test_a_step_inside_a_step_has_a_key_of_its_own() -> None:
    sink, keys = Sink(), []

    async def handler(ctx: InvocationContext) -> None:
        async def inner() -> None:
            keys.append(ctx.step_key)

        async def outer() -> None:
            await ctx.step("charge", inner)
            await ctx.step("fee", inner)
            keys.append(ctx.step_key)

        await ctx.step("pay", outer)

    await handler(attempt(sink, 1))
    assert keys == ["inv-1/pay/charge", "inv-1/pay/fee", "inv-1/pay"]


async def test_a_budget_period_past_the_longest_wait_parks_for_the_longest_wait() -> None:
    class Far(Meter):
        async def check(self) -> Verdict:
            return Verdict("tokens_per_period", True, 8e9)

    sink = Sink()
    with pytest.raises(Suspend):
        await attempt(sink, 1, usage=Far()).admit_model_call("m1")
    [[wait]] = sink.parks
    assert wait.wake_in == MAX_WAIT_SECONDS


async def test_a_step_renamed_while_the_run_waited_does_not_keep_the_attempt_replaying() -> None:
    """docs/durable.md: a renamed step runs again. The old record is never reached again, but
    the attempt is past everything recorded once it replays the wait it parked on: its later
    events are stored (they were dropped, as if stored before, for the rest of the run)."""
    sink = Sink()

    async def handler(ctx: InvocationContext, step: str) -> Any:
        quoted = await ctx.step(step, lambda: "quote")
        await ctx.emit({"type": "before_w"})
        value = await ctx.wait_for_input("w")
        await ctx.emit({"type": "after_w"})
        return quoted, value

    with pytest.raises(Suspend):
        await handler(attempt(sink, 1), "quote")
    sink.resolve("w", 3)
    assert await handler(attempt(sink, 2), "quote_v2") == ("quote", 3)
    assert kinds(sink) == ["before_w", "after_w"]
