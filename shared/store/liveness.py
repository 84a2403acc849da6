"""Crash detection through the database session (PostgreSQL): the worker registry, and the
dedicated connection on which each worker process holds its advisory lock while it lives.

A worker process registers in ``tether_workers`` and takes the session-level advisory lock
``(LOCK_NAMESPACE, lock_id)`` on a connection of its own. PostgreSQL releases that lock the moment
the session ends, so a SIGKILLed, OOM-killed or crashed process shows as a registered worker
without its lock. The lock is never the only evidence: a worker also beats its row several times
per heartbeat interval, and :meth:`LivenessSession.declare_dead` only takes a worker whose lock
is gone *and* whose beat is old (the rules and their proof: :mod:`tether.worker.liveness`).

In ``pg_locks`` a lock appears as ``classid = LOCK_NAMESPACE, objid = lock_id, objsubid = 2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from tether.store.engine import Database
from tether.store.errors import StoreError, wrapped
from tether.store.schema import HANDED_BACK, Status, invocations, status_is, workers

LOCK_NAMESPACE = 0x7E7E_0002
"""``classid`` of every worker's lock (the migration lock is the one-key 0x7E7E0001)."""
ALIVE, DEAD, STOPPED = "alive", "dead", "stopped"
NOW = "extract(epoch from clock_timestamp())::double precision"

HELD = f"""
SELECT l.objid::bigint AS lock_id, l.pid FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = {LOCK_NAMESPACE}
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
"""Every worker lock granted in this database, and the backend holding it."""

SCAN = sa.text(
    f"""
    WITH held AS MATERIALIZED ({HELD})
    SELECT pg_backend_pid() AS scanner, w.name, w.lock_id,
           w.beat_at < {NOW} - :grace AS silent,
           w.beat_at < {NOW} - :stale_after AS stale,
           w.lock_id IN (SELECT lock_id FROM held) AS held
    FROM tether_workers w WHERE w.state = '{ALIVE}' AND w.lock_id IS NOT NULL
    """
)

DECLARE_DEAD = sa.text(
    f"""
    WITH dead AS (
        UPDATE tether_workers SET state = '{DEAD}', ended_at = {NOW}
        WHERE name = :name AND lock_id = :lock_id AND state = '{ALIVE}'
          AND beat_at < {NOW} - :grace
          AND :lock_id NOT IN (SELECT lock_id FROM ({HELD}) AS held)
        RETURNING name
    ), released AS (
        UPDATE tether_invocations SET heartbeat_at = 0
        WHERE status = '{Status.ACTIVE.value}' AND worker IN (SELECT name FROM dead)
          AND heartbeat_at <> {HANDED_BACK}
        RETURNING id
    )
    SELECT (SELECT count(*) FROM dead) AS died, (SELECT count(*) FROM released) AS released
    """
)
"""One statement, so the lock and the beat are judged again at the moment the worker is marked
dead and its attempts are handed back (``heartbeat_at = 0``: the reaper replaces them at once;
those it handed back itself as it stopped stay so, not counted as crashes)."""

w = workers.c
inv = invocations.c


@dataclass(frozen=True, slots=True)
class Sighting:
    """A registered worker as one scan saw it."""

    name: str
    lock_id: int
    held: bool
    """Some session holds its lock now."""
    silent: bool
    """Its last beat is older than the grace the scan was given."""
    stale: bool
    """Its last beat is older than the scan's ``stale_after``: without its lock it is dead
    whether or not anyone saw the lock go."""


@dataclass(frozen=True, slots=True)
class Scan:
    scanner_pid: int
    """The backend that ran the scan: a change means the scanning session is not the same."""
    sightings: list[Sighting]


@dataclass(frozen=True, slots=True)
class Registration:
    name: str
    lock_id: int | None
    """None: this process runs on heartbeats only (a pooler broke the session, or a live
    process already uses its name)."""
    backend_pid: int
    problem: str = ""
    """Why ``lock_id`` is None, for the log."""


@dataclass(frozen=True, slots=True)
class Predecessor:
    """The row a process found under its own name at start: an earlier process of that name."""

    lock_id: int | None
    lock_held: bool
    state: str


class LivenessSession:
    """One connection of its own, autocommit, that holds a worker's lock while the process lives.

    Every statement on it is short, so the session is never idle for long (idle-session killers,
    NAT timeouts) and never inside a long statement (a killed client's lock would outlive it
    until the statement ended).
    """

    def __init__(self, engine: AsyncEngine, conn: AsyncConnection, backend_pid: int) -> None:
        self._engine = engine
        self._conn = conn
        self.backend_pid = backend_pid

    @classmethod
    async def open(cls, url: str | sa.URL) -> LivenessSession:
        engine = create_async_engine(url, poolclass=NullPool)
        try:
            with wrapped():
                conn = await engine.connect()
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                pid = int(await conn.scalar(sa.text("SELECT pg_backend_pid()")) or 0)
        except BaseException:
            await engine.dispose()
            raise
        return cls(engine, conn, pid)

    async def close(self) -> None:
        try:
            with wrapped():
                await self._conn.close()
        except StoreError:
            pass  # a connection already broken: closing it is all that was left to do
        finally:
            await self._engine.dispose()

    async def _scalar(self, statement: Any, params: dict[str, Any] | None = None) -> Any:
        with wrapped():
            return await self._conn.scalar(statement, params or {})

    async def keeps_its_session(self, probes: int = 3) -> bool:
        """Whether statements run in separate transactions reach the same backend. A pooler in
        transaction mode hands each transaction whichever server connection is free."""
        for _ in range(probes):
            if await self._scalar(sa.text("SELECT pg_backend_pid()")) != self.backend_pid:
                return False
        return True

    async def predecessor(self, name: str) -> Predecessor | None:
        with wrapped():
            row = (
                await self._conn.execute(
                    sa.text(
                        f"SELECT w.lock_id, w.state, w.lock_id IN (SELECT lock_id FROM ({HELD}) h)"
                        " AS held FROM tether_workers w WHERE w.name = :name"
                    ),
                    {"name": name},
                )
            ).first()
        if row is None:
            return None
        return Predecessor(row.lock_id, bool(row.held), row.state)

    async def take_lock(self, lock_id: int | None) -> int | None:
        """Take ``lock_id`` (a new one when None, or when another session holds it); the id
        held, checked from a second transaction to be held by this very backend, else None."""
        for _ in range(3):
            if lock_id is None:
                lock_id = int(
                    await self._scalar(sa.text("SELECT nextval('tether_worker_lock_ids')"))
                )
            taken = await self._scalar(
                sa.text("SELECT pg_try_advisory_lock(:ns, :id)"),
                {"ns": LOCK_NAMESPACE, "id": lock_id},
            )
            if taken:
                break
            lock_id = None  # held elsewhere (a half-open session of ours, say): take a fresh one
        if lock_id is None:
            return None
        holder = await self._scalar(
            sa.text(f"SELECT pid FROM ({HELD}) h WHERE lock_id = :id"), {"id": lock_id}
        )
        if holder != self.backend_pid or not await self.keeps_its_session(1):
            await self._scalar(
                sa.text("SELECT pg_advisory_unlock(:ns, :id)"),
                {"ns": LOCK_NAMESPACE, "id": lock_id},
            )
            return None
        return lock_id

    async def enrol(self, name: str, lock_id: int | None, *, fresh: bool) -> bool:
        """Write this process's row: alive, holding ``lock_id``. False when a process that was
        running before this session (re)connected finds its row declared dead meanwhile."""
        now = sa.literal_column(NOW, sa.Float)
        with wrapped():
            if not fresh:
                state = await self._conn.scalar(sa.select(w.state).where(w.name == name))
                if state == DEAD:
                    return False
            values = {"lock_id": lock_id, "backend_pid": self.backend_pid, "state": ALIVE}
            insert = _upsert(name, values, now, fresh=fresh)
            await self._conn.execute(insert)
        return True

    async def release_attempts_of(self, name: str) -> int:
        """Hand back the attempts still active under ``name``: an earlier process's, since this
        one has claimed nothing yet. The reaper replaces them at once."""
        with wrapped():
            result = await self._conn.execute(
                sa.update(invocations)
                .where(
                    status_is(inv.status, Status.ACTIVE),
                    inv.worker == name,
                    inv.heartbeat_at != HANDED_BACK,
                )
                .values(heartbeat_at=0.0)
            )
        return int(result.rowcount)

    async def beat(self, name: str, lock_id: int | None) -> int | None:
        """Beat this process's row; the backend that ran it, or None when the row is no longer
        alive under ``lock_id`` (this process was declared dead)."""
        with wrapped():
            row = (
                await self._conn.execute(
                    sa.update(workers)
                    .where(w.name == name, _same_lock(lock_id), w.state == ALIVE)
                    .values(beat_at=sa.literal_column(NOW, sa.Float))
                    .returning(sa.func.pg_backend_pid())
                )
            ).first()
        return None if row is None else int(row[0])

    async def scan(self, grace: float, stale_after: float) -> Scan:
        with wrapped():
            params = {"grace": grace, "stale_after": stale_after}
            rows = (await self._conn.execute(SCAN, params)).all()
        if not rows:
            pid = int(await self._scalar(sa.text("SELECT pg_backend_pid()")))
            return Scan(pid, [])
        sightings = [
            Sighting(r.name, r.lock_id, bool(r.held), bool(r.silent), bool(r.stale)) for r in rows
        ]
        return Scan(int(rows[0].scanner), sightings)

    async def declare_dead(self, name: str, lock_id: int, grace: float) -> tuple[bool, int]:
        """Mark a worker dead if its lock is still gone and its beat still older than ``grace``
        (``liveness_grace`` or ``stale_after``, as the rule that found it says); hand its active
        attempts back. (died, attempts handed back)."""
        with wrapped():
            row = (
                await self._conn.execute(
                    DECLARE_DEAD, {"name": name, "lock_id": lock_id, "grace": grace}
                )
            ).one()
        return bool(row.died), int(row.released)

    async def unregister(self, name: str, lock_id: int | None) -> None:
        """A clean stop: the row says ``stopped`` (no scan will judge it) and the lock goes."""
        with wrapped():
            await self._conn.execute(
                sa.update(workers)
                .where(w.name == name, _same_lock(lock_id), w.state == ALIVE)
                .values(state=STOPPED, ended_at=sa.literal_column(NOW, sa.Float))
            )
            if lock_id is not None:
                await self._conn.execute(
                    sa.text("SELECT pg_advisory_unlock(:ns, :id)"),
                    {"ns": LOCK_NAMESPACE, "id": lock_id},
                )


class Registry:
    """The registry through the store's ordinary connections: the beat a worker falls back on
    while its liveness session is down, and the expiry of old rows."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def beat(self, name: str, lock_id: int | None) -> bool:
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.update(workers)
                .where(w.name == name, _same_lock(lock_id), w.state == ALIVE)
                .values(beat_at=self._db.now)
            )
        return result.rowcount == 1

    async def delete_expired(self, older_than: float) -> int:
        """Forget workers whose last beat is older than ``older_than`` seconds."""
        async with self._db.transaction() as conn:
            result = await conn.execute(
                sa.delete(workers).where(w.beat_at < self._db.now - older_than)
            )
        return int(result.rowcount)


def _same_lock(lock_id: int | None) -> sa.ColumnElement[bool]:
    return w.lock_id.is_(None) if lock_id is None else w.lock_id == lock_id


def _upsert(name: str, values: dict[str, Any], now: sa.ColumnElement[float], *, fresh: bool) -> Any:
    from sqlalchemy.dialects import postgresql

    insert = postgresql.insert(workers).values(
        name=name, started_at=now, beat_at=now, ended_at=None, **values
    )
    update = {**values, "beat_at": now, "ended_at": None}
    if fresh:
        update["started_at"] = now
    return insert.on_conflict_do_update(index_elements=["name"], set_=update)
