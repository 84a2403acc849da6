"""The reaper and attempts handed back: by a stopping worker (a deploy; not a crash) and by a
pass that fails half-way (what it wrote is still announced); and how a pass reports."""

from __future__ import annotations

import pytest

from tests.unit.test_reaper import Enqueued, make_reaper, row, running, settings, shift
from tether.errors import ErrorCode
from tether.store.errors import StoreUnavailable
from tether.store.schema import StaleAttempt
from tether.store.store import Store
from tether.worker.reaper import ReapReport, Recover, decide


async def test_a_run_handed_back_by_stopping_workers_is_never_counted_as_a_crash(
    store: Store,
) -> None:
    """Rolling deploys: each attempt's worker is SIGTERMed and hands it back after its grace.
    No backoff, no recovery_limit_exceeded however many deploys the run lives through; the
    replacement still replays it as a recovery."""
    invocation_id = await running(store)
    enqueued = Enqueued()
    for attempt in range(1, 8):  # past max_attempts (5)
        await store.release(invocation_id, attempt, stopping=True)
        report = await make_reaper(store, enqueued, recovery_backoff=5).reap_once()
        assert (report.recovered, report.failed) == (1, 0)
        replacement = await store.claim(invocation_id, "host:2")
        assert replacement is not None and replacement.is_recovery
    assert {delay for _, delay in enqueued.calls} == {0.0}
    assert (await row(store, invocation_id)).crashes == 0
    await shift(store, invocation_id, heartbeat_at=60)  # then its worker does crash: the first
    await make_reaper(store, enqueued, recovery_backoff=5).reap_once()
    assert enqueued.calls[-1] == (invocation_id, 0.0)
    assert (await row(store, invocation_id)).crashes == 1


def test_a_handed_back_attempt_is_replaced_at_once_whatever_crashed_before() -> None:
    limited = settings(max_attempts=3, recovery_backoff=5)
    handed_back = StaleAttempt("inv", 9, False, crashes=8, handed_back=True)
    assert decide(handed_back, has_recover=True, settings=limited) == Recover(0.0)
    lost = decide(handed_back, has_recover=False, settings=limited)  # nothing can resume it
    assert not isinstance(lost, Recover) and lost.error_code is ErrorCode.WORKER_LOST


async def test_a_pass_that_fails_half_way_still_sends_what_it_wrote(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = await running(store), await running(store)
    for invocation_id in (first, second):
        await shift(store, invocation_id, heartbeat_at=60)
    requeue = store.requeue_for_recovery
    calls = 0

    async def second_fails(*args: object, **kwargs: bool) -> bool:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise StoreUnavailable("down")
        return await requeue(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "requeue_for_recovery", second_fails)
    enqueued = Enqueued()
    with pytest.raises(StoreUnavailable):
        await make_reaper(store, enqueued).reap_once()
    assert len(enqueued.calls) == 1  # the first's replacement was written: its token went out


def test_a_pass_reports_in_words_not_as_a_python_object() -> None:
    """``tether reap`` printed ``ReapReport(recovered=0, ...)``."""
    assert str(ReapReport(recovered=2, deleted_events=7)) == (
        "recovered 2, failed 0, cancelled 0, requeued 0, deleted 0, deleted events 7, "
        "counts corrected 0"
    )
