"""The one seam to the database: every query Tether runs, on PostgreSQL or the embedded SQLite.

:class:`Store` is a thin facade, so callers keep ``services.store.<verb>``; the queries live by
side: :mod:`~tether.store.invocations` (the gateway's accepts, cancels and reads),
:mod:`~tether.store.claims` (which invocation runs next, within caps),
:mod:`~tether.store.attempts` (a worker's attempt writes), :mod:`~tether.store.maintenance`
(the reaper's), with :mod:`~tether.store.endings` (terminal transitions),
:mod:`~tether.store.eventlog` (cursors), :mod:`~tether.store.eventreads` (what streams read),
:mod:`~tether.store.batching` (the group commit's rules) and :mod:`~tether.store.dialect`
(everything that differs between the two databases).

Every batched verb takes a batch and gives one result per item, in order; its single form is a
batch of one. Every error a driver raises comes out as a :class:`StoreError`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tether.events import Event
from tether.store.attempts import Attempts
from tether.store.autovacuum import Coverage, coverage
from tether.store.batching import one
from tether.store.buckets import Buckets
from tether.store.claims import Claims
from tether.store.engine import Database, create_engine, create_reader
from tether.store.errors import (
    Conflict,
    OwnerLimitReached,
    SchemaMissing,
    StoreError,
    StoreUnavailable,
    Superseded,
    TenantLimitReached,
    ValueRefused,
    wrapped,
)
from tether.store.eventreads import EventReads, StreamPage, StreamRead
from tether.store.invocations import AcceptResult, Invocations
from tether.store.journal import Journal
from tether.store.liveness import Registry
from tether.store.maintenance import Expired, Maintenance, Queued
from tether.store.migrate import LEDGER, migrate, newest_version
from tether.store.opencounts import recount_open
from tether.store.parks import Parks
from tether.store.planner_statistics import PlannerStatistics
from tether.store.schema import Claim, Invocation, NewInvocation, StaleAttempt, Status
from tether.store.tenants import Tenants
from tether.store.threads import Threads
from tether.store.usage import Usage
from tether.store.writes import Accepted, AppendRequest, Finished, FinishRequest, NewEvent

__all__ = [
    "AcceptResult",
    "Accepted",
    "AppendRequest",
    "Conflict",
    "FinishRequest",
    "Finished",
    "NewEvent",
    "OwnerLimitReached",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StreamPage",
    "StreamRead",
    "Superseded",
    "TenantLimitReached",
    "ValueRefused",
]


class Store:
    """Async access to invocations and events over one SQLAlchemy engine."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        reader: AsyncEngine | None = None,
        temporary_file: Path | None = None,
        deadline: float = 0.0,
    ) -> None:
        self.engine = engine
        self.db = Database.of(engine, reader, deadline=deadline)
        self.dialect = self.db.dialect.name
        self._temporary_file = temporary_file
        self._invocations = Invocations(self.db)
        self._attempts = Attempts(self.db)
        self._claims = Claims(self.db)
        self._maintenance = Maintenance(self.db)
        self._reads = EventReads(self.db)
        self.journal = Journal(self.db)
        """Durable execution's steps and waits (:mod:`tether.store.journal`)."""
        self.parks = Parks(self.db)
        """Attempts ending ``waiting`` on their waits (:mod:`tether.store.parks`)."""
        self.registry = Registry(self.db)
        """The worker registry behind crash detection (:mod:`tether.store.liveness`)."""
        self.threads = Threads(self.db)
        """Agent threads, per owner and session (:mod:`tether.store.threads`)."""
        self.tenants = Tenants(self.db)
        """Tenants' limits (:mod:`tether.store.tenants`)."""
        self.usage = Usage(self.db, self.tenants)
        """Model usage per invocation and per tenant and period (:mod:`tether.store.usage`)."""
        self.buckets = Buckets(self.db)
        """Tenants' accept-rate token buckets (:mod:`tether.store.buckets`)."""
        self.statistics = PlannerStatistics(self.db)
        """The planner's statistics, analyzed again when a status outgrows them
        (:mod:`tether.store.planner_statistics`)."""

    @classmethod
    def postgres(
        cls,
        url: str,
        *,
        pool_size: int = 10,
        separate_reads: bool = True,
        deadline: float = 0.0,
    ) -> Store:
        """PostgreSQL at ``url``, each checkout of a connection given up after ``deadline``
        seconds (:attr:`.engine.Database.deadline`; 0: never). ``separate_reads``: reads go to
        a pool of their own in autocommit (:func:`create_reader`), as a gateway's status reads
        and streams' pages gain by; False: on the writer's pool, each in a transaction of its
        own, as a worker's do. With the reader in the worker, ``bench flood``'s tenant A
        finished 223-231 invocations a second where it finished 270-280 without it, and B's
        accept -> start p99 was 3.2-3.9x its idle figure against 1.6-1.8x
        (docs/performance-history.md); why was not found."""
        reader = create_reader(url, pool_size=pool_size) if separate_reads else None
        return cls(create_engine(url, pool_size=pool_size), reader=reader, deadline=deadline)

    THROWAWAY = ":memory:"
    """The embedded path of a throwaway store (a temporary file removed on close)."""

    @classmethod
    def embedded(cls, path: str) -> Store:
        """SQLite at ``path``; ``:memory:`` gives a throwaway file removed on close."""
        temporary = None
        if path == cls.THROWAWAY:
            handle, name = tempfile.mkstemp(prefix="tether-", suffix=".db")
            Path(name).unlink()
            temporary = Path(name)
            path = name
        url = f"sqlite+aiosqlite:///{path}"
        return cls(create_engine(url), reader=create_reader(url), temporary_file=temporary)

    @property
    def gather_turns(self) -> int:
        """Loop turns a group commit of writes to this store lets pass before it takes its batch
        (:attr:`.engine.Database.gather_turns`)."""
        return self.db.gather_turns

    def sibling(self) -> Store:
        """A second store on the same database with its own connections (for another thread):
        one pool, no reader, so the liveness fallback's pings keep open the very connection its
        beats use."""
        return Store(create_engine(self.engine.url, pool_size=1))

    async def migrate(self) -> list[str]:
        with wrapped():
            return await migrate(self.engine)

    async def autovacuum_coverage(self) -> Coverage | None:
        """What PostgreSQL's autovacuum leaves alone of Tether's tables; None on SQLite."""
        if self.dialect != "postgresql":
            return None
        async with self.db.connection() as conn:
            return await coverage(conn)

    async def recount_open(self) -> None:
        """Count every owner's and tenant's open invocations again (``tether migrate
        --recount``): after rows were written around the store, or by processes of a version
        before the counts were kept."""
        async with self.db.transaction() as conn:
            await recount_open(conn, self.db.dialect)

    async def close(self) -> None:
        """Close every connection (the reader's too when closing the writer's fails)."""
        try:
            self.db.close_sync()
            await self.engine.dispose()
        finally:
            if self.db.reader is not None:
                await self.db.reader.dispose()
            if self._temporary_file is not None:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{self._temporary_file}{suffix}").unlink(missing_ok=True)  # noqa: ASYNC240

    async def ping(self) -> None:
        """Raises :class:`StoreUnavailable` when the database cannot be reached, and
        :class:`SchemaMissing` when it lacks this release's newest migration."""
        async with self.db.connection() as conn:
            applied = await conn.scalar(sa.text(f"SELECT max(version) FROM {LEDGER}"))
        if applied is None or str(applied) < newest_version(self.dialect):
            raise SchemaMissing("the database lacks this release's migrations")

    # -- the gateway's side: accepts, cancels, reads ----------------------------------------

    async def accept(
        self,
        new: NewInvocation,
        *,
        max_open_per_owner: int = 0,
        max_queued: Mapping[str, int] | None = None,
    ) -> Accepted:
        """Insert a new invocation, or return the existing one for a repeated request; raises
        :class:`Conflict`, :class:`OwnerLimitReached`, :class:`TenantLimitReached` or
        :class:`ValueRefused`."""
        return one(
            await self.accept_many(
                [new], max_open_per_owner=max_open_per_owner, max_queued=max_queued
            )
        )

    async def accept_many(
        self,
        batch: Sequence[NewInvocation],
        *,
        max_open_per_owner: int = 0,
        max_queued: Mapping[str, int] | None = None,
    ) -> list[AcceptResult]:
        """``max_queued``: tenant → the open invocations it may have (absent: no cap)."""
        return await self._invocations.accept_many(
            batch, max_open_per_owner=max_open_per_owner, max_queued=max_queued
        )

    async def request_cancel(self, invocation_id: str) -> Finished | None:
        return await self._invocations.request_cancel(invocation_id)

    async def get(self, invocation_id: str) -> Invocation | None:
        return await self._invocations.get(invocation_id)

    async def input_of(self, invocation_id: str) -> Any:
        return await self._invocations.input_of(invocation_id)

    async def get_many(self, invocation_ids: Sequence[str]) -> list[Invocation | None]:
        """Each id's invocation, in order, from one statement (None where there is none)."""
        return await self._invocations.get_many(invocation_ids)

    async def list_owned(
        self,
        owner: str,
        *,
        status: Status | None = None,
        session_id: str | None = None,
        before_seq: int | None = None,
        limit: int = 50,
    ) -> list[Invocation]:
        return await self._invocations.list_owned(
            owner, status=status, session_id=session_id, before_seq=before_seq, limit=limit
        )

    async def events_after(self, invocation_id: str, after: int, limit: int = 1000) -> list[Event]:
        return await self._reads.events_after(invocation_id, after, limit)

    async def read_streams(self, reads: Sequence[StreamRead]) -> list[StreamPage | None]:
        """For each read, the invocation's owner, status and last cursor with its events after
        the read's cursor, all in one statement (:mod:`tether.store.eventreads`)."""
        return await self._reads.read_streams(reads)

    async def count_queued(self) -> int:
        return await self._invocations.count_queued()

    # -- the worker's side: an attempt's writes ---------------------------------------------

    async def claim_next(
        self,
        count: int,
        worker: str,
        hints: Sequence[str] = (),
        *,
        newcomers: bool = False,
        among: Sequence[str] | None = None,
        reserved: int = 0,
    ) -> list[Claim]:
        """Start up to ``count`` attempts: the next invocations in fair order, within every cap
        (:mod:`tether.store.claims`); fewer, or none, when nothing more may run now. ``hints``:
        the invocation ids the tokens in hand carry. ``newcomers``: only of tenants with
        nothing running (a reserved slot's claim); ``among``: of these tenants alone.
        ``reserved``: up to this many more, each of a tenant with nothing running."""
        return await self._claims.claim_next(
            count, worker, hints, newcomers=newcomers, among=among, reserved=reserved
        )

    def announced(self, tenants: list[str] | None) -> None:
        """Tenants with new queued work, as a gateway announced them, for this process's next
        claims (:mod:`tether.store.candidates`); None: some may have been missed."""
        self._claims.announced(tenants)

    def none_seen_queued(self) -> bool:
        """Whether this process's last scan found no queued work
        (:meth:`Claims.none_seen_queued`)."""
        return self._claims.none_seen_queued()

    def may_have_newcomers(self, running_here: Collection[str], more_than: int = 0) -> bool:
        """Whether a ``newcomers`` claim may find work (for more than ``more_than`` tenants), as
        far as this process knows without a read: its tenant list is stale or names a tenant
        (that many tenants) not in ``running_here``."""
        return self._claims.may_have_newcomers(running_here, more_than)

    async def claim(self, invocation_id: str, worker: str) -> Claim | None:
        """Start this invocation's next attempt if it is queued, heads its session and its
        tenant and the deployment are under their caps."""
        [claim] = await self.claim_many([invocation_id], worker)
        return claim

    async def claim_many(self, invocation_ids: Sequence[str], worker: str) -> list[Claim | None]:
        return await self._claims.claim_ids(invocation_ids, worker)

    async def append(self, request: AppendRequest) -> list[Event]:
        """Append events under the attempt's fence; raises :class:`Superseded`."""
        return one(await self.append_many([request]))

    async def append_many(
        self, requests: Sequence[AppendRequest]
    ) -> list[list[Event] | Superseded | StoreError]:
        return await self._attempts.append_many(requests)

    async def save_checkpoint(self, invocation_id: str, attempt: int, state: Any) -> None:
        await self._attempts.save_checkpoint(invocation_id, attempt, state)

    async def finish(self, request: FinishRequest) -> Finished:
        """End an attempt under its fence; raises :class:`Superseded`."""
        return one(await self.finish_many([request]))

    async def finish_many(
        self, requests: Sequence[FinishRequest]
    ) -> list[Finished | Superseded | StoreError]:
        return await self._attempts.finish_many(requests)

    async def heartbeat(
        self,
        attempts: Sequence[tuple[str, int]],
        claiming: bool = False,
        worker: str = "",
        abandoned: Sequence[tuple[str, int]] = (),
    ) -> dict[str, bool]:
        return await self._attempts.heartbeat(attempts, claiming, worker, abandoned)

    async def release(self, invocation_id: str, attempt: int, *, stopping: bool) -> None:
        await self._attempts.release(invocation_id, attempt, stopping=stopping)

    # -- the reaper's side ------------------------------------------------------------------

    async def stale_attempts(self, stale_after: float, limit: int = 100) -> list[StaleAttempt]:
        return await self._maintenance.stale_attempts(stale_after, limit)

    async def requeue_for_recovery(
        self,
        invocation_id: str,
        attempt: int,
        stale_after: float,
        delay: float,
        *,
        crash: bool = True,
    ) -> bool:
        return await self._maintenance.requeue_for_recovery(
            invocation_id, attempt, stale_after, delay, crash=crash
        )

    async def take_unclaimed(self, older_than: float, limit: int = 500) -> list[str]:
        return await self._maintenance.take_unclaimed(older_than, limit)

    async def release_active(self) -> int:
        return await self._maintenance.release_active()

    async def queued_page(self, after_seq: int, limit: int = 500) -> list[Queued]:
        return await self._maintenance.queued_page(after_seq, limit)

    async def mark_resent(self, invocation_ids: Sequence[str]) -> list[str]:
        return await self._maintenance.mark_resent(invocation_ids)

    async def delete_expired(
        self, retention: float, limit: int | None = None, max_events: int | None = None
    ) -> Expired:
        return await self._maintenance.delete_expired(retention, limit, max_events)

    async def audit_open_counts(self) -> list[tuple[str, str]]:
        """Correct the open counts that drifted from the rows (the reaper, every
        ``timers.count_audit``); the (scope, name) keys corrected."""
        return await self._maintenance.audit_open_counts()
