"""The liveness session on a real PostgreSQL: locks as other sessions see them, the one-statement
verdict, and a transaction pooler recognised (emulated: each statement on another connection)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from tests.faults.harness_ext import until
from tether.settings import Settings
from tether.store.liveness import LivenessSession
from tether.store.schema import NewInvocation, workers
from tether.store.store import Store
from tether.worker.liveness import Liveness

GRACE = 1.0
STALE_AFTER = 10.0


@pytest.fixture(scope="module")
def migrated_pg() -> Iterator[str]:
    """A database of this module's own: the workers of other suites register in the shared
    one, take lock ids from its sequence and would show up in these tests' scans."""
    from tests.services import private_migrated_database

    with private_migrated_database() as url:
        yield url


@pytest.fixture
async def store(migrated_pg: str) -> AsyncIterator[Store]:
    s = Store.postgres(migrated_pg, pool_size=2)
    async with s.engine.begin() as conn:
        await conn.execute(sa.text("TRUNCATE tether_invocations, tether_events, tether_workers"))
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def sessions(migrated_pg: str) -> AsyncIterator[list[LivenessSession]]:
    opened: list[LivenessSession] = []
    yield opened
    for session in opened:
        await session.close()


async def open_session(url: str, opened: list[LivenessSession]) -> LivenessSession:
    session = await LivenessSession.open(url)
    opened.append(session)
    return session


async def register(session: LivenessSession, name: str) -> int:
    lock_id = await session.take_lock(None)
    assert lock_id is not None
    assert await session.enrol(name, lock_id, fresh=True)
    return lock_id


async def age_beat(store: Store, name: str, seconds: float) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(
            sa.update(workers)
            .where(workers.c.name == name)
            .values(beat_at=workers.c.beat_at - seconds)
        )


async def released(scanner: LivenessSession) -> bool:
    return not any(s.held for s in (await scanner.scan(GRACE, STALE_AFTER)).sightings)


async def active_attempt(store: Store, worker: str) -> str:
    invocation_id = str(uuid.uuid4())
    await store.accept(NewInvocation(invocation_id, "alice", None, {}, "h"))
    assert await store.claim(invocation_id, worker) is not None
    return invocation_id


async def test_a_workers_lock_is_held_while_its_session_lives_and_gone_once_it_ends(
    store: Store, migrated_pg: str, sessions: list[LivenessSession]
) -> None:
    scanner = await open_session(migrated_pg, sessions)
    worker = await open_session(migrated_pg, sessions)
    lock_id = await register(worker, "host:1")
    [sighting] = (await scanner.scan(GRACE, STALE_AFTER)).sightings
    assert (sighting.name, sighting.lock_id, sighting.held, sighting.silent, sighting.stale) == (
        "host:1",
        lock_id,
        True,
        False,
        False,
    )
    await worker.close()

    async def released() -> bool:
        [seen] = (await scanner.scan(GRACE, STALE_AFTER)).sightings
        return not seen.held and not seen.silent

    await until(released, 10, "the lock to go")


async def test_a_worker_is_declared_dead_only_without_its_lock_and_with_an_old_beat(
    store: Store, migrated_pg: str, sessions: list[LivenessSession]
) -> None:
    scanner = await open_session(migrated_pg, sessions)
    worker = await open_session(migrated_pg, sessions)
    lock_id = await register(worker, "host:1")
    invocation_id = await active_attempt(store, "host:1")
    other = await active_attempt(store, "host:2")

    await age_beat(store, "host:1", 10)
    assert await scanner.declare_dead("host:1", lock_id, GRACE) == (False, 0)  # lock held
    assert await worker.beat("host:1", lock_id) == worker.backend_pid
    await worker.close()
    await until(lambda: released(scanner), 10, "the lock to go")
    assert await scanner.declare_dead("host:1", lock_id, GRACE) == (False, 0)  # fresh beat
    await age_beat(store, "host:1", 10)
    assert await scanner.declare_dead("host:1", lock_id, GRACE) == (True, 1)
    assert await scanner.declare_dead("host:1", lock_id, GRACE) == (False, 0)  # once

    stale = {s.invocation_id for s in await store.stale_attempts(stale_after=60)}
    assert stale == {invocation_id}  # handed back: the reaper takes it now, not the other
    assert other not in stale


async def test_a_worker_declared_dead_after_it_handed_back_as_it_stopped_caused_no_crash(
    store: Store, migrated_pg: str, sessions: list[LivenessSession]
) -> None:
    """A stopping worker handed an attempt back, then died before its row was marked stopped:
    the verdict on it hands back the rest, and leaves that one a stopping worker's."""
    scanner = await open_session(migrated_pg, sessions)
    worker = await open_session(migrated_pg, sessions)
    lock_id = await register(worker, "host:1")
    stopped = await active_attempt(store, "host:1")
    running = await active_attempt(store, "host:1")
    await store.release(stopped, 1, stopping=True)
    await worker.close()
    await until(lambda: released(scanner), 10, "the lock to go")
    await age_beat(store, "host:1", 10)
    assert await scanner.declare_dead("host:1", lock_id, GRACE) == (True, 1)
    later = await open_session(migrated_pg, sessions)
    await later.release_attempts_of("host:1")  # and a restart under its name
    stale = {s.invocation_id: s.handed_back for s in await store.stale_attempts(60)}
    assert stale == {stopped: True, running: False}


async def test_a_scan_tells_a_beat_older_than_stale_after_and_such_a_worker_can_be_declared_dead(
    store: Store, migrated_pg: str, sessions: list[LivenessSession]
) -> None:
    """Rule 2: no scanner need have seen its lock held (every worker killed at once)."""
    worker = await open_session(migrated_pg, sessions)
    lock_id = await register(worker, "host:1")
    invocation_id = await active_attempt(store, "host:1")
    sessions.remove(worker)
    await worker.close()
    scanner = await open_session(migrated_pg, sessions)  # a scanner that never saw the lock
    await until(lambda: released(scanner), 10, "the lock to go")

    await age_beat(store, "host:1", GRACE + 1)
    [sighting] = (await scanner.scan(GRACE, STALE_AFTER)).sightings
    assert (sighting.held, sighting.silent, sighting.stale) == (False, True, False)
    assert await scanner.declare_dead("host:1", lock_id, STALE_AFTER) == (False, 0)

    await age_beat(store, "host:1", STALE_AFTER)
    [sighting] = (await scanner.scan(GRACE, STALE_AFTER)).sightings
    assert (sighting.held, sighting.silent, sighting.stale) == (False, True, True)
    assert await scanner.declare_dead("host:1", lock_id, STALE_AFTER) == (True, 1)
    assert (await scanner.scan(GRACE, STALE_AFTER)).sightings == []
    assert [s.invocation_id for s in await store.stale_attempts(60)] == [invocation_id]


async def test_a_worker_declared_dead_learns_it_from_its_next_beat(
    store: Store, migrated_pg: str, sessions: list[LivenessSession]
) -> None:
    worker = await open_session(migrated_pg, sessions)
    lock_id = await register(worker, "host:1")
    async with store.engine.begin() as conn:
        await conn.execute(sa.update(workers).values(state="dead"))
    assert await worker.beat("host:1", lock_id) is None
    assert await worker.enrol("host:1", lock_id, fresh=False) is False


async def test_a_clean_stop_leaves_a_stopped_row_that_no_scan_judges(
    store: Store, migrated_pg: str, sessions: list[LivenessSession]
) -> None:
    scanner = await open_session(migrated_pg, sessions)
    worker = await open_session(migrated_pg, sessions)
    lock_id = await register(worker, "host:1")
    await worker.unregister("host:1", lock_id)
    assert (await scanner.scan(GRACE, STALE_AFTER)).sightings == []


async def test_a_process_finds_what_an_earlier_process_of_its_name_left(
    store: Store, migrated_pg: str, sessions: list[LivenessSession]
) -> None:
    earlier = await open_session(migrated_pg, sessions)
    await register(earlier, "host:1")
    invocation_id = await active_attempt(store, "host:1")
    later = await open_session(migrated_pg, sessions)
    predecessor = await later.predecessor("host:1")
    assert predecessor is not None and predecessor.lock_held  # a namesake that still lives
    await earlier.close()  # its backend ends a moment later, and with it the lock

    async def gone() -> bool:
        found = await later.predecessor("host:1")
        return found is not None and not found.lock_held

    await until(gone, 10, "the earlier process's lock to go")
    assert await later.release_attempts_of("host:1") == 1
    assert [s.invocation_id for s in await store.stale_attempts(60)] == [invocation_id]


class RoundRobin:
    """A transaction pooler, emulated: each statement runs on the next of several connections."""

    def __init__(self, conns: list[AsyncConnection]) -> None:
        self._conns = conns
        self._next = 0

    def _conn(self) -> AsyncConnection:
        conn = self._conns[self._next % len(self._conns)]
        self._next += 1
        return conn

    async def scalar(self, *args: Any, **kwargs: Any) -> Any:
        return await self._conn().scalar(*args, **kwargs)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        return await self._conn().execute(*args, **kwargs)

    async def close(self) -> None:
        for conn in self._conns:
            await conn.close()


async def test_a_transaction_pooler_is_recognised_and_the_lock_it_took_is_let_go(
    store: Store,
) -> None:
    conns = []
    for _ in range(2):
        conn = await store.engine.connect()
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        conns.append(conn)
    pids = [int(await c.scalar(sa.text("SELECT pg_backend_pid()"))) for c in conns]
    pooled = LivenessSession(store.engine, cast(AsyncConnection, RoundRobin(conns)), pids[0])
    try:
        assert await pooled.keeps_its_session() is False
        assert await pooled.take_lock(None) is None
        async with store.engine.connect() as probe:  # the pooled sessions' locks only: other
            held = await probe.scalar(  # suites' workers hold theirs on the same server
                sa.text(
                    "SELECT count(*) FROM pg_locks"
                    " WHERE locktype = 'advisory' AND granted AND pid = ANY(:pids)"
                ),
                {"pids": pids},
            )
        assert held == 0
    finally:
        for conn in conns:
            await conn.close()


def liveness_thread(url: str, store: Store, name: str, found: list[str]) -> Liveness:
    settings = Settings.model_validate({"database_url": url})
    return Liveness(
        settings=settings,
        store=store,
        name=name,
        found_dead=lambda: found.append("found"),
        declared_dead=lambda: found.append("declared"),
    )


async def test_a_process_whose_name_a_live_process_holds_stays_out_of_the_registry(
    store: Store, migrated_pg: str, sessions: list[LivenessSession]
) -> None:
    namesake = await open_session(migrated_pg, sessions)
    lock_id = await register(namesake, "host:1")
    found: list[str] = []
    thread = liveness_thread(migrated_pg, store, "host:1", found)
    thread.start()
    await asyncio.to_thread(thread.join, 20)
    assert not thread.is_alive() and not thread.registered.is_set()
    assert await namesake.beat("host:1", lock_id) == namesake.backend_pid  # untouched
    assert found == []


async def test_a_process_hands_back_what_a_dead_process_of_its_name_left_and_registers(
    store: Store, migrated_pg: str, sessions: list[LivenessSession]
) -> None:
    earlier = await open_session(migrated_pg, sessions)
    await register(earlier, "host:1")
    invocation_id = await active_attempt(store, "host:1")
    sessions.remove(earlier)
    await earlier.close()
    scanner = await open_session(migrated_pg, sessions)
    await until(lambda: released(scanner), 10, "the earlier process's lock to go")
    found: list[str] = []
    thread = liveness_thread(migrated_pg, store, "host:1", found)
    thread.start()
    try:
        await asyncio.to_thread(thread.registered.wait, 20)
        assert found == ["found"]
        assert [s.invocation_id for s in await store.stale_attempts(60)] == [invocation_id]
        [sighting] = (await scanner.scan(GRACE, STALE_AFTER)).sightings
        assert sighting.name == "host:1" and sighting.held
    finally:
        thread.stop()
        await asyncio.to_thread(thread.join, 20)
    assert (await scanner.scan(GRACE, STALE_AFTER)).sightings == []  # stopped cleanly


async def enrol_unlocked(store: Store, session: LivenessSession, name: str) -> None:
    """A row whose lock nobody holds: a worker killed before any scanner saw its lock (once its
    beat is aged), or one re-establishing its session."""
    async with store.engine.connect() as conn:
        lock_id = int(await conn.scalar(sa.text("SELECT nextval('tether_worker_lock_ids')")))
    assert await session.enrol(name, lock_id, fresh=True)


async def states(store: Store) -> dict[str, str]:
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.select(workers.c.name, workers.c.state))).all()
    return {r.name: r.state for r in rows}


async def test_a_worker_marks_dead_the_workers_nobody_saw_go_and_hands_their_attempts_back(
    store: Store, migrated_pg: str, sessions: list[LivenessSession]
) -> None:
    """Thirty rows left ``alive`` by workers killed together, found by a worker started later;
    a worker re-establishing its session (no lock, a fresh beat) and a frozen one (its lock
    held, no beat for a minute) are left alive."""
    writer = await open_session(migrated_pg, sessions)
    orphans = [f"gone:{i}" for i in range(30)]
    for name in orphans:
        await enrol_unlocked(store, writer, name)
        await age_beat(store, name, 60)
    held_by_orphans = [await active_attempt(store, name) for name in orphans[:2]]
    await enrol_unlocked(store, writer, "reconnecting:1")
    frozen = await open_session(migrated_pg, sessions)
    await register(frozen, "frozen:1")
    await age_beat(store, "frozen:1", 60)

    found: list[str] = []
    thread = liveness_thread(migrated_pg, store, "host:1", found)
    thread.start()
    try:

        async def orphans_dead() -> bool:
            now = await states(store)
            return all(now[name] == "dead" for name in orphans)

        await until(orphans_dead, 20, "the orphaned rows to be marked dead")
        now = await states(store)
        assert (now["reconnecting:1"], now["frozen:1"], now["host:1"]) == ("alive",) * 3
        assert "found" in found
        stale = {s.invocation_id for s in await store.stale_attempts(60)}
        assert stale == set(held_by_orphans)  # handed back: the reaper replaces them at once
    finally:
        thread.stop()
        await asyncio.to_thread(thread.join, 20)
