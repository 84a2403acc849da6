"""The reaper against a cancel that lands between its read of the stale attempts and its
replacement or ending of one: the cancel is honoured (no replacement attempt runs, and the run
ends cancelled, not worker_lost)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.unit.test_reaper import Enqueued, accepted, make_reaper, running, shift
from tether.store.schema import StaleAttempt, Status
from tether.store.store import Store


@pytest.mark.parametrize("has_recover", [True, False])  # replaced, or ended worker_lost
async def test_a_cancel_requested_after_the_stale_read_is_not_lost_to_a_replacement(
    store: Store, monkeypatch: pytest.MonkeyPatch, has_recover: bool
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
    reaper = make_reaper(store, enqueued, has_recover=has_recover)
    await reaper.reap_once()
    monkeypatch.setattr(store, "stale_attempts", read)
    await reaper.reap_once()

    done = await store.get(invocation_id)
    assert done is not None and done.status is Status.CANCELLED, done
    assert enqueued.calls == []  # no replacement attempt was sent for
    assert await store.claim(invocation_id, "host:2") is None


class Snapshotting(Enqueued):
    """A broker that records, at each send, which of ``watched`` the store has queued: a send
    to a Redis that stops answering takes its socket timeout (5 s) to fail."""

    def __init__(self, store: Store, watched: list[str], status: Status) -> None:
        super().__init__()
        self.store, self.watched, self.status = store, watched, status
        self.seen_at_send: list[int] = []
        """At each send, how many of ``watched`` were in ``status``."""

    async def send(self, invocation_ids: Sequence[str], delay: float) -> None:
        rows = [await self.store.get(i) for i in self.watched]
        self.seen_at_send.append(sum(r is not None and r.status is self.status for r in rows))
        await super().send(invocation_ids, delay)


async def test_a_pass_queues_every_replacement_before_it_sends_their_tokens(store: Store) -> None:
    """Every dead attempt is claimable (``timers.claim_poll`` needs no message) before the
    pass waits for the broker, and the tokens go in one send, not one wait each."""
    ids = [await running(store) for _ in range(3)]
    for invocation_id in ids:
        await shift(store, invocation_id, heartbeat_at=60)
    enqueued = Snapshotting(store, ids, Status.QUEUED)
    report = await make_reaper(store, enqueued).reap_once()
    assert report.recovered == 3
    assert enqueued.seen_at_send == [3]
    assert sorted(sent for sent, _ in enqueued.calls) == sorted(ids)


async def test_a_pass_ends_every_dead_attempt_before_it_sends_their_successors(
    store: Store,
) -> None:
    """Without ``@app.recover``: each dead attempt fails, and its session's next invocation
    gets its token only once the pass has written every ending."""
    dead = [await running(store, session=f"s{n}") for n in range(3)]
    successors = [await accepted(store, session=f"s{n}") for n in range(3)]
    for invocation_id in dead:
        await shift(store, invocation_id, heartbeat_at=60)
    enqueued = Snapshotting(store, dead, Status.FAILED)
    report = await make_reaper(store, enqueued, has_recover=False).reap_once()
    assert report.failed == 3
    assert enqueued.seen_at_send == [3, 3, 3]
    assert sorted(sent for sent, _ in enqueued.calls) == sorted(successors)
