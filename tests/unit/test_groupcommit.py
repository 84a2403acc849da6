"""Group commit: concurrent submits go together; a flush may gather for a few loop turns first;
failures reach every item of their batch, and a cancelled flush leaves no caller waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from tether.groupcommit import GroupCommit


class Recorder:
    """A flush that records its batches and answers each item doubled."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.batches: list[list[int]] = []
        self.gate = gate

    async def __call__(self, items: list[int]) -> Sequence[int | BaseException]:
        self.batches.append(items)
        if self.gate is not None:
            await self.gate.wait()
        return [2 * i for i in items]


async def submit_over_turns(group: GroupCommit[int, int], turns: int) -> list[int]:
    """One submit per loop turn, ``turns`` of them, as requests read in successive turns."""
    futures = []
    for i in range(turns):
        futures.append(group.submit_nowait(i))
        await asyncio.sleep(0)
    return list(await asyncio.gather(*futures))


async def test_submits_of_one_turn_go_in_one_flush() -> None:
    flush = Recorder()
    group = GroupCommit(flush)
    assert await asyncio.gather(*(group.submit(i) for i in range(5))) == [0, 2, 4, 6, 8]
    assert flush.batches == [[0, 1, 2, 3, 4]]


async def test_without_gathering_a_later_turn_waits_for_the_next_flush() -> None:
    flush = Recorder()
    assert await submit_over_turns(GroupCommit(flush), 3) == [0, 2, 4]
    assert flush.batches[0] == [0]


async def test_gathering_turns_take_in_what_those_turns_submit() -> None:
    flush = Recorder()
    assert await submit_over_turns(GroupCommit(flush, gather_turns=2), 3) == [0, 2, 4]
    assert flush.batches == [[0, 1, 2]]


async def test_only_a_flush_that_starts_gathers() -> None:
    """The flush after one in flight takes what waited meanwhile, at once."""
    gate = asyncio.Event()
    flush = Recorder(gate)
    group = GroupCommit(flush, gather_turns=2)
    first = group.submit_nowait(1)
    for _ in range(3):  # the first flush gathered and is now held at the gate
        await asyncio.sleep(0)
    assert flush.batches == [[1]]
    second = group.submit_nowait(2)
    gate.set()
    assert list(await asyncio.gather(first, second)) == [2, 4]
    assert flush.batches == [[1], [2]]


async def test_a_failed_flush_fails_each_item_of_its_batch_only() -> None:
    calls: list[list[int]] = []

    async def flush(items: list[int]) -> Sequence[int | BaseException]:
        calls.append(items)
        if len(calls) == 1:
            raise RuntimeError("the first flush fails")
        return items

    group = GroupCommit(flush)
    results = await asyncio.gather(group.submit(1), group.submit(2), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert await group.submit(3) == 3


async def test_a_flush_answering_the_wrong_count_fails_its_batch() -> None:
    async def flush(items: list[int]) -> Sequence[int | BaseException]:
        return items[:1]

    group = GroupCommit(flush)
    results = await asyncio.gather(group.submit(1), group.submit(2), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)


async def test_an_item_the_flush_answers_with_an_exception_raises_it() -> None:
    async def flush(items: list[int]) -> Sequence[int | BaseException]:
        return [ValueError(str(i)) if i % 2 else i for i in items]

    group = GroupCommit(flush)
    results = await asyncio.gather(group.submit(1), group.submit(2), return_exceptions=True)
    assert isinstance(results[0], ValueError) and results[1] == 2


@pytest.mark.parametrize("gather_turns", [0, 3])
async def test_a_cancelled_flush_leaves_no_caller_waiting(gather_turns: int) -> None:
    flush = Recorder(asyncio.Event())  # never set: the flush hangs until cancelled
    group = GroupCommit(flush, gather_turns=gather_turns)
    futures = [group.submit_nowait(i) for i in range(3)]
    [runner] = group._runners
    await asyncio.sleep(0)  # the runner starts: gathering, or in its flush
    runner.cancel()
    results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 1)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    await asyncio.wait_for(group.idle(), 1)


async def test_at_most_max_batch_items_go_in_one_flush() -> None:
    flush = Recorder()
    group = GroupCommit(flush, max_batch=2)
    assert await asyncio.gather(*(group.submit(i) for i in range(5))) == [0, 2, 4, 6, 8]
    assert flush.batches == [[0, 1], [2, 3], [4]]


async def test_a_flush_stalled_past_its_time_lets_another_start_up_to_the_most() -> None:
    """One stuck flush holds back the items after it only ``stalled_after`` seconds."""
    stuck = asyncio.Event()
    batches: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        batches.append(items)
        if items[0] < 10:  # the first two batches hang until released
            await stuck.wait()
        return [2 * i for i in items]

    group = GroupCommit(flush, stalled_after=0.05, most_in_flight=2)
    first = group.submit_nowait(1)
    await asyncio.sleep(0.01)
    early = group.submit_nowait(2)
    await asyncio.sleep(0.01)
    assert batches == [[1]]  # not stalled yet: the item waits
    await asyncio.sleep(0.05)
    late = group.submit_nowait(3)  # the one in flight has stalled: another flush starts
    await asyncio.sleep(0.01)
    assert batches == [[1], [2, 3]]
    await asyncio.sleep(0.06)
    last = group.submit_nowait(10)  # both stalled, but two is the most
    await asyncio.sleep(0.01)
    assert batches == [[1], [2, 3]] and not last.done()
    stuck.set()
    assert list(await asyncio.gather(first, early, late, last)) == [2, 4, 6, 20]
    assert batches == [[1], [2, 3], [10]]
