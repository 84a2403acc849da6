"""The group commit's rules for a batch, against a scripted write: no database needed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from tether.store.batching import one, rounds, write_batch
from tether.store.errors import StoreError, StoreUnavailable, ValueRefused


class ScriptedWrite:
    """A group write that records its calls: items named ``bad`` make a grouped write fail,
    items in ``held`` are left out of a grouped write once, ``down`` fails every write."""

    def __init__(self, held: Sequence[str] = (), down: bool = False) -> None:
        self.calls: list[tuple[list[str], bool]] = []
        self.held = set(held)
        self.down = down

    async def __call__(self, items: Sequence[str], alone: bool) -> Mapping[int, str]:
        self.calls.append((list(items), alone))
        if self.down:
            raise StoreUnavailable("OperationalError: connection refused")
        if any(item.startswith("bad") for item in items):
            raise ValueRefused("UnicodeEncodeError: surrogates not allowed", "refused")
        held = set() if alone else self.held & set(items)
        self.held -= held
        return {n: f"wrote {item}" for n, item in enumerate(items) if item not in held}


def key(item: str) -> str:
    return item.split("#")[0]


def test_rounds_keep_submission_order_and_hold_each_key_once() -> None:
    assert rounds(["a", "b", "a", "c", "a", "b"]) == [[0, 1, 3], [2, 5], [4]]
    assert rounds([]) == []


async def test_a_repeated_id_waits_for_the_next_transaction() -> None:
    write = ScriptedWrite()
    results = await write_batch(["a#1", "b", "a#2"], key, write)
    assert results == ["wrote a#1", "wrote b", "wrote a#2"]
    assert write.calls == [(["a#1", "b"], False), (["a#2"], True)]


async def test_a_refused_item_fails_alone_and_the_others_are_written() -> None:
    write = ScriptedWrite()
    results = await write_batch(["a", "bad", "c"], key, write)
    assert results[0] == "wrote a" and results[2] == "wrote c"
    assert isinstance(results[1], ValueRefused) and results[1].public_message == "refused"
    assert write.calls[0] == (["a", "bad", "c"], False)  # grouped first, then one by one
    assert write.calls[1:] == [(["a"], True), (["bad"], True), (["c"], True)]


async def test_an_unavailable_database_fails_every_item_without_retrying_each() -> None:
    write = ScriptedWrite(down=True)
    results = await write_batch(["a", "b", "c"], key, write)
    assert all(isinstance(r, StoreUnavailable) for r in results)
    assert len(write.calls) == 1


async def test_held_rows_are_written_alone_first_then_grouped_again() -> None:
    write = ScriptedWrite(held=["b", "c", "d"])
    results = await write_batch(["a", "b", "c", "d"], key, write)
    assert results == ["wrote a", "wrote b", "wrote c", "wrote d"]
    assert write.calls == [
        (["a", "b", "c", "d"], False),  # a written; b, c, d held
        (["b"], True),  # the first held one alone: it may wait for its lock
        (["c", "d"], False),  # the rest grouped again
    ]


async def test_a_batch_of_one_raises_its_own_error() -> None:
    assert one(await write_batch(["a"], key, ScriptedWrite())) == "wrote a"
    with pytest.raises(ValueRefused):
        one(await write_batch(["bad"], key, ScriptedWrite()))
    with pytest.raises(StoreError):
        one(await write_batch(["a"], key, ScriptedWrite(down=True)))
