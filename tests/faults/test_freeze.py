"""A frozen worker is replaced and, thawed, changes nothing; a merely busy one is left alone."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.client import new_id
from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import (
    STALE_AFTER,
    Db,
    api_for,
    assert_clean_events,
    attempts_started,
    holding,
    log_has,
    owner_of,
    start_workers,
    until,
    worker_pid,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(90)]

# Fields a live attempt's writes would move: heartbeat, events, status, outcome.
WATCHED = ("status", "attempt", "worker", "heartbeat_at", "last_event_id", "finished_at", "output")


def ticks_of(db: Db, invocation_id: str, attempt: int) -> int:
    return sum(
        1
        for e in db.events(invocation_id)
        if e["type"] == "tick" and e["data"]["attempt"] == attempt
    )


def watched(db: Db, invocation_id: str) -> tuple[object, ...]:
    row = db.row(invocation_id)
    return tuple(row[k] for k in WATCHED)


async def test_a_frozen_attempt_that_thaws_after_its_replacement_writes_nothing_and_stops(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    # stale_after 5 s: the replacement's worker is frozen too while the first one thaws, and
    # must not look dead meanwhile.
    cluster = make_cluster(fresh_db, redis_url, TETHER_TIMERS__STALE_AFTER="5")
    _, base = cluster.start_gateway()
    [first] = start_workers(cluster, 1)
    db = Db(fresh_db)
    invocation_id = new_id()
    # Attempt 1 writes an event every 0.2 s for minutes; attempt 2 writes six over ~3 s.
    spec = {
        "attempt1": {"emit": 1000, "emit_sleep": 0.2},
        "attempt2": {"emit": 6, "emit_sleep": 0.5},
    }
    async with api_for(base) as api:
        assert (await api.post({"id": invocation_id, "input": spec, "background": True}))[0] == 202
        await until(lambda: db.all_match([invocation_id], holding(3)), 30, "attempt 1 writing")
        frozen = worker_pid(db.row(invocation_id))
        owner_of(frozen, [first])
        [second] = start_workers(cluster, 1)

        os.kill(frozen, signal.SIGSTOP)
        try:
            await until(
                lambda: ticks_of(db, invocation_id, attempt=2), 30, "the replacement to write"
            )
            replacement = worker_pid(db.row(invocation_id))
            owner_of(replacement, [second])
            # Freeze the replacement too, so nothing may legitimately write while attempt 1 thaws.
            os.kill(replacement, signal.SIGSTOP)
            try:
                before, events_before = watched(db, invocation_id), db.events(invocation_id)
                os.kill(frozen, signal.SIGCONT)
                stopped = (
                    f"invocation {invocation_id}: attempt 1 stopped without finishing (superseded)"
                )
                await until(
                    lambda: log_has(first, stopped), 10, "the thawed attempt to stop itself"
                )
                assert watched(db, invocation_id) == before
                assert db.events(invocation_id) == events_before
            finally:
                os.kill(replacement, signal.SIGCONT)
        finally:
            os.kill(frozen, signal.SIGCONT)

        await until(
            lambda: db.row(invocation_id)["status"] == "completed", 30, "the replacement to finish"
        )
        _, state = await api.get(invocation_id)
        assert state["attempt"] == 2 and state["output"]["attempt"] == 2
        events = db.events(invocation_id)
        assert_clean_events(events)
        assert attempts_started(events) == [1, 2]
        second_start = next(
            e["cursor"] for e in events if e["type"] == "run.started" and e["data"]["attempt"] == 2
        )
        late = [e for e in events if e["cursor"] > second_start and e["data"].get("attempt") == 1]
        assert late == []
        assert first.popen.poll() is None  # the thawed process lives on; only its attempt stopped


async def test_a_handler_blocking_its_loop_for_three_stale_periods_is_not_replaced(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url)
    _, base = cluster.start_gateway()
    workers = start_workers(cluster, 2)  # the idle one reaps meanwhile
    db = Db(fresh_db)
    invocation_id = new_id()
    spec = {"default": {"emit": 1, "block_sleep": 3 * STALE_AFTER}}
    async with api_for(base) as api:
        assert (await api.post({"id": invocation_id, "input": spec, "background": True}))[0] == 202
        await until(lambda: db.row(invocation_id)["status"] != "queued", 30, "the run to start")
        holder = owner_of(worker_pid(db.row(invocation_id)), workers)
        await until(
            lambda: db.row(invocation_id)["status"] == "completed",
            3 * STALE_AFTER + 30,
            "the run to finish",
        )
        _, state = await api.get(invocation_id)
        assert state["attempt"] == 1 and state["output"]["recovered"] is False
        events = db.events(invocation_id)
        assert_clean_events(events)
        assert attempts_started(events) == [1]
        assert "lost its worker" not in "".join(w.log() for w in workers)
        assert holder.popen.poll() is None


async def test_blocking_the_loop_mid_write_replaces_nothing_in_that_process(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, tmp_path: Path
) -> None:
    """The blocked loop holds a row lock (its own write, mid-transaction) that the heartbeat
    thread's statement would queue behind; the process's other attempts must not go stale."""
    cluster = make_cluster(fresh_db, redis_url)
    _, base = cluster.start_gateway()
    [busy] = start_workers(cluster, 1)
    db = Db(fresh_db)
    blocker, sibling = new_id(), new_id()
    async with api_for(base) as api:
        # The sibling awaits throughout; the blocker blocks mid-write for 9 s once told to.
        go = tmp_path / "go"
        sibling_spec = {"default": {"sleep": 3 * STALE_AFTER + 5}}
        await api.post({"id": sibling, "input": sibling_spec, "background": True})
        block = {"default": {"after_file": str(go), "block_mid_write": 3 * STALE_AFTER}}
        await api.post({"id": blocker, "input": block, "background": True})
        pair = [blocker, sibling]
        await until(
            lambda: db.all_match(pair, lambda r: r["status"] == "active"), 30, "both running"
        )
        [pid] = {worker_pid(r) for r in db.rows(pair).values()}
        owner_of(pid, [busy])
        [reaping] = start_workers(cluster, 1)  # its reaper would replace anything that looked dead
        go.touch()

        await until(
            lambda: db.all_match(pair, lambda r: r["status"] == "completed"), 60, "both to finish"
        )
        _, state = await api.get(blocker)
        assert state["output"]["caught"] is True, "never caught a write mid-transaction"
        for invocation_id in pair:
            events = db.events(invocation_id)
            assert_clean_events(events)
            assert attempts_started(events) == [1], invocation_id
        assert "lost its worker" not in reaping.log() + busy.log()
