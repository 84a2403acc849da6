"""ctx.step, ctx.sleep and ctx.wait_for_input against an in-memory journal: record, park, replay."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.fakes import MemoryJournal
from tether import StepFailed, WaitTimeout
from tether.budgets import UsageMeter
from tether.context import InvocationContext
from tether.durable import DurableUsageError, Suspend
from tether.store.journal import Resolution, WaitKind


class Sink(MemoryJournal):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    async def emit(self, event_type: str, data: Any) -> int:
        self.events.append(data)
        self.cursor += 1
        return self.cursor

    async def save_checkpoint(self, state: Any) -> None:
        return None

    def checkpoint(self) -> Any:
        return None


def attempt(
    sink: Sink, number: int = 1, inline_sleep_max: float = 5.0, usage: UsageMeter | None = None
) -> InvocationContext:
    """The context of one attempt, replaying whatever earlier attempts recorded in ``sink``."""
    return InvocationContext(
        invocation_id="inv-1",
        session_id=None,
        attempt=number,
        sink=sink,
        recorded=sink.recorded(),
        is_recovery=False,
        inline_sleep_max=inline_sleep_max,
        usage=usage,
    )


async def test_a_recorded_step_replays_its_value_without_calling_the_function_again() -> None:
    sink, calls = Sink(), []

    async def fetch(x: int) -> dict[str, Any]:
        calls.append(x)
        return {"x": x, "tuple": (1, 2)}

    first = await attempt(sink).step("fetch", fetch, 7)
    again = await attempt(sink, 2).step("fetch", fetch, 7)
    assert first == again == {"x": 7, "tuple": [1, 2]}  # the JSON value, both times
    assert calls == [7]


async def test_a_failed_step_is_recorded_by_type_and_replayed_as_step_failed() -> None:
    sink, calls = Sink(), []

    def explode() -> None:
        calls.append(1)
        raise KeyError("secret detail")

    with pytest.raises(KeyError):
        await attempt(sink).step("explode", explode)
    with pytest.raises(StepFailed) as replayed:
        await attempt(sink, 2).step("explode", explode)
    assert replayed.value.error_type == "KeyError" and "secret" not in str(replayed.value)
    assert calls == [1]


async def test_a_step_name_used_twice_in_one_run_is_an_error() -> None:
    ctx = attempt(Sink())
    await ctx.step("a", lambda: 1)
    with pytest.raises(DurableUsageError, match="'a'"):
        await ctx.step("a", lambda: 2)


async def test_a_step_may_not_take_a_durable_sleeps_name() -> None:
    ctx = attempt(Sink())
    with pytest.raises(DurableUsageError, match="durable sleeps"):
        await ctx.step("sleep#1", lambda: 1)
    await ctx.step("sleep 1", lambda: 1)  # only the prefix is reserved
    with pytest.raises(Suspend):  # the first durable sleep still has its name
        await ctx.sleep(30)


async def test_a_wait_whose_prompt_and_details_exceed_the_event_cap_is_refused() -> None:
    sink = Sink()
    ctx = InvocationContext(
        invocation_id="inv-1", session_id=None, attempt=1, sink=sink, max_event_bytes=1000
    )
    with pytest.raises(DurableUsageError, match=r"'big'.*over limits.max_event_bytes \(1,000\)"):
        await ctx.wait_for_input("big", prompt="x" * 600, details={"more": "y" * 400})
    assert sink.parks == []  # nothing was parked
    with pytest.raises(Suspend):
        await ctx.wait_for_input("small", prompt="x" * 600)


async def test_step_key_is_stable_per_invocation_and_name_and_only_set_inside_a_step() -> None:
    ctx, keys = attempt(Sink()), []

    async def remember() -> None:
        keys.append(ctx.step_key)

    await ctx.step("pay", remember)
    assert keys == ["inv-1/pay"]
    with pytest.raises(LookupError):
        _ = ctx.step_key


async def test_a_sync_step_runs_off_the_event_loop_thread() -> None:
    loop_thread = threading.get_ident()
    ran_on = await attempt(Sink()).step("where", threading.get_ident)
    assert ran_on != loop_thread


async def test_waiting_for_input_parks_then_the_next_attempt_gets_the_value() -> None:
    sink = Sink()
    with pytest.raises(Suspend):
        await attempt(sink).wait_for_input("approve", prompt="Ship it?", timeout=60)
    (wait,) = sink.parks[0]
    assert (wait.name, wait.kind, wait.wake_in) == ("approve", WaitKind.INPUT, 60)
    assert wait.details == {"prompt": "Ship it?"}
    sink.resolve("approve", {"ok": True})
    assert await attempt(sink, 2).wait_for_input("approve") == {"ok": True}


async def test_a_timed_out_wait_raises_wait_timeout_in_the_handler() -> None:
    sink = Sink()
    with pytest.raises(Suspend):
        await attempt(sink).wait_for_input("w", timeout=1)
    sink.resolve("w", how=Resolution.TIMEOUT)
    with pytest.raises(WaitTimeout):
        await attempt(sink, 2).wait_for_input("w", timeout=1)


async def test_suspend_is_not_swallowed_by_except_exception() -> None:
    sink = Sink()

    async def handler(ctx: InvocationContext) -> str:
        try:
            await ctx.wait_for_input("w")
        except Exception:
            return "swallowed"
        return "not reached"

    with pytest.raises(Suspend):
        await handler(attempt(sink))


async def test_short_sleeps_sleep_in_process_and_long_ones_park_until_elapsed() -> None:
    sink = Sink()
    await attempt(sink, inline_sleep_max=5).sleep(0.01)
    assert sink.parks == []
    with pytest.raises(Suspend):
        await attempt(sink).sleep(30)
    (wait,) = sink.parks[0]
    assert (wait.name, wait.kind, wait.wake_in) == ("sleep#1", WaitKind.SLEEP, 30)
    sink.resolve("sleep#1", how=Resolution.ELAPSED)
    await attempt(sink, 2).sleep(30)  # returns at once


async def test_events_emitted_while_replaying_are_not_stored_again() -> None:
    sink = Sink()

    async def handler(ctx: InvocationContext) -> Any:
        await ctx.emit({"type": "status", "message": "starting"})
        answer = await ctx.wait_for_input("name")
        await ctx.emit({"type": "status", "message": f"hello {answer}"})
        return answer

    with pytest.raises(Suspend):
        await handler(attempt(sink))
    sink.resolve("name", "ann")
    assert await handler(attempt(sink, 2)) == "ann"
    assert [e["message"] for e in sink.events] == ["starting", "hello ann"]


async def test_invalid_wait_names_and_timeouts_are_refused() -> None:
    ctx = attempt(Sink())
    for name in ("", "has space", "sleep#1", "x" * 129, "x\n"):
        with pytest.raises(DurableUsageError):
            await ctx.wait_for_input(name)
    with pytest.raises(DurableUsageError):
        await ctx.wait_for_input("ok", timeout=0)
