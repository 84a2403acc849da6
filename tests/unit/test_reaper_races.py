"""The reaper against a cancel that lands between its read of the stale attempts and its
replacement of one: the cancel is honoured, no replacement attempt runs."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.unit.test_reaper import Enqueued, make_reaper, running, shift
from tether.store.schema import StaleAttempt, Status
from tether.store.store import Store


async def test_a_cancel_requested_after_the_stale_read_is_not_lost_to_a_replacement(
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    invocation_id = await running(store)
    await shift(store, invocation_id, heartbeat_at=60)
    read = store.stale_attempts

    async def then_cancelled(stale_after: float) -> Sequence[StaleAttempt]:
        found = await read(stale_after)  # seen without a cancel request ...
        assert await store.request_cancel(invocation_id) is None  # ... flagged: still active
        return found

    monkeypatch.setattr(store, "stale_attempts", then_cancelled)
    enqueued = Enqueued()
    reaper = make_reaper(store, enqueued)
    await reaper.reap_once()
    monkeypatch.setattr(store, "stale_attempts", read)
    await reaper.reap_once()

    done = await store.get(invocation_id)
    assert done is not None and done.status is Status.CANCELLED, done
    assert enqueued.calls == []  # no replacement attempt was sent for
    assert await store.claim(invocation_id, "host:2") is None
