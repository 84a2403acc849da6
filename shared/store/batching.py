"""How a batch of writes of one kind reaches the database: the group commit's rules, written
once for every batched verb (accept, claim, append, finish). A single call is a batch of one.

1. **Distinct ids per transaction.** A repeated id waits for the next round, where it meets what
   the first left behind: the same request accepted again, a claim already taken, an attempt
   already finished.
2. **Held rows.** A grouped write skips the rows another transaction holds and leaves them out
   of its results (:meth:`Dialect.held_rows`: it never waits for a lock while holding others).
   The first held item is then written alone, waiting for its row while holding nothing else,
   and the rest are grouped again (usually free by then: a heartbeat holds them all at once).
3. **Isolation.** A grouped write the database fails is retried item by item, each in its own
   transaction, so a value the database refuses fails its own item (:class:`ValueRefused`) and
   the others are written as if it had never been there. An unavailable database fails every
   item not yet written, without retrying each against a database that is down.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from tether.store.errors import StoreError, StoreUnavailable

Item = TypeVar("Item")
R = TypeVar("R")
MAX_ALONE_TRIES = 3


GroupWrite = Callable[[Sequence[Item], bool], Awaitable[Mapping[int, R]]]
"""``write(items, alone)``: one transaction for ``items`` (distinct ids); the result of each item
it wrote, by position. A position left out was not written now (its row was held by another
transaction, or changed under the write) and is written again, alone. ``alone`` is true for a
single item written on its own: it may wait for its row's lock."""


async def write_batch(
    items: Sequence[Item], key: Callable[[Item], str], write: GroupWrite[Item, R]
) -> list[R | StoreError]:
    """Every item written by the rules above; one result or :class:`StoreError` per item."""
    results: dict[int, R | StoreError] = {}
    for todo in rounds([key(item) for item in items]):
        await _write_round(items, todo, write, results)
    return [results[i] for i in range(len(items))]  # every round sets each of its items


def one(results: Sequence[R | Exception]) -> R:
    """The result of a batch of one: its value, or its exception raised."""
    [result] = results
    if isinstance(result, Exception):
        raise result
    return result


def rounds(keys: Sequence[str]) -> list[list[int]]:
    """Indexes of ``keys`` in rounds of distinct keys, each in submission order."""
    found: list[list[int]] = []
    seen: dict[str, int] = {}
    for index, key in enumerate(keys):
        repeat = seen.get(key, 0)
        seen[key] = repeat + 1
        if repeat == len(found):
            found.append([])
        found[repeat].append(index)
    return found


async def _write_round(
    items: Sequence[Item],
    todo: list[int],
    write: GroupWrite[Item, R],
    results: dict[int, R | StoreError],
) -> None:
    while todo:
        try:
            written = await write([items[i] for i in todo], len(todo) == 1)
        except StoreUnavailable as exc:
            for i in todo:
                results[i] = exc
            return
        except StoreError as exc:
            if len(todo) == 1:
                results[todo[0]] = exc
            else:
                await _isolated(items, todo, write, results)
            return
        held = [i for n, i in enumerate(todo) if n not in written]
        results.update({todo[n]: result for n, result in written.items()})
        if held:
            results[held[0]] = await _alone(items[held[0]], write)
        todo = held[1:]


async def _isolated(
    items: Sequence[Item],
    todo: list[int],
    write: GroupWrite[Item, R],
    results: dict[int, R | StoreError],
) -> None:
    for n, i in enumerate(todo):
        result = results[i] = await _alone(items[i], write)
        if isinstance(result, StoreUnavailable):
            for rest in todo[n + 1 :]:
                results[rest] = result
            return


async def _alone(item: Item, write: GroupWrite[Item, R]) -> R | StoreError:
    for _ in range(MAX_ALONE_TRIES):
        try:
            written = await write([item], True)
        except StoreError as exc:
            return exc
        if 0 in written:
            return written[0]
    return StoreUnavailable("the row kept changing under the write; try again")
