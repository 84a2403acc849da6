"""The claim: the one way an invocation becomes ``active``, within every cap.

PostgreSQL decides which invocation runs next (docs/architecture.md, "Who runs next"). Without any
lock, a claim reads the tenants that may have queued work with their limits and stride passes, and
the global cap, in one statement (:mod:`tether.store.candidates`: a loose index scan of
``tenant_queue``, or this process's last list of them). When a cap applies to any of them it then
takes the claim lock (:meth:`Dialect.begin_claim`: a transaction advisory lock on PostgreSQL, the
single writer on SQLite), so claims take turns across every process and host and each counts the
running attempts every earlier claim left (the ``tenant_active`` partial index: as many entries as
running attempts); with no cap anywhere there is nothing to serialize, and concurrent claims only
spread over different rows (``FOR UPDATE SKIP LOCKED`` on the heads). It then allocates the free
slots fairly (:mod:`tether.store.fairness`), reads each chosen tenant's heads (``priority DESC,
seq``, skipping invocations whose session has an older open one and replacements still in their
backoff), flips them to ``active`` and stores the passes. Limits are read by every claim, so a
change applies at the next one.

Finishing, parking and handing back never take the lock: they only lower the counts, so a claim
that raced them under-admits for a moment, never over-admits.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import cached_property
from typing import Any

import sqlalchemy as sa

from tether.outcomes import started_data
from tether.store.bound import BoundBatch
from tether.store.candidates import CandidateReads, QueuedTenants
from tether.store.connection import Connection
from tether.store.engine import Database
from tether.store.eventlog import insert_events, numbered
from tether.store.fairness import (
    Allocation,
    TenantLoad,
    allocate_reserving,
    first_of_each,
    wanted,
)
from tether.store.heads import HeadStarts, turn
from tether.store.schema import (
    RESUME,
    Claim,
    Status,
    claim_clock,
    global_limits,
    invocations,
    status_is,
    tenant_passes,
)
from tether.store.tenants import (
    effective_limits,
)
from tether.store.writes import NewEvent

inv = invocations.c
PASSES = BoundBatch("passes", (sa.column("tenant", sa.Text), sa.column("pass", sa.Float)))
"""The passes of the tenants a claim served, in one parameter (``SELECT … WHERE true``: SQLite
parses an upsert from a ``SELECT`` only with a ``WHERE``)."""
MAX_ROUNDS = 8
"""Allocation rounds per claim: a round repeats only when a chosen tenant had fewer claimable
invocations than it was given (session-blocked, in backoff, or on PostgreSQL a listed tenant
drained since: :func:`tether.store.candidates.known_tenants`), with the slots it left over."""


def opening(won: Any) -> NewEvent:
    """The event opening a claimed attempt: ``run.resumed`` after a wait, else ``run.started``."""
    data = started_data(won.attempt, resumed=won.resumed_by == RESUME)
    return NewEvent(data["type"], data)


class Claims:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._reads = CandidateReads(db.dialect)
        self._queued = QueuedTenants()
        self._heads = HeadStarts(db)

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
        """Start up to ``count`` attempts: the next invocations in fair order, within caps.
        ``hints``: the invocation ids the tokens in hand carry (their tenants are read even
        when this process's tenant list lacks them, :mod:`tether.store.candidates`).
        ``newcomers``: only of tenants with nothing running anywhere (a reserved slot's claim:
        it reads the list unless that is stale, and leaves the list's state as it was).
        ``among``: a newcomers' claim for these tenants alone (an announcement's), which reads
        them instead of the list: under a burst from 256 owners the list named them all, and a
        claim's read and allocation cost grows with the tenants it weighs.
        ``reserved``: up to this many more, each of a tenant with nothing running that the
        ``count`` left out (:func:`tether.store.fairness.allocate_reserving`), after them in the
        result (a caller may take the first ``count`` for its own slots, the rest for those)."""
        if count <= 0:
            return []
        if newcomers and among is not None:
            return await self._claim(count, worker, (), scan=False, newcomers=True, among=among)
        if newcomers:
            stale = self._queued.stale()
            return await self._claim(count, worker, hints, scan=stale, newcomers=True)
        scan = not self._queued.fresh()
        won = await self._claim(count, worker, hints, scan=scan, reserved=reserved)
        if len(won) < count and not scan:  # the list may lack a tenant with work: scan now
            won += await self._claim(count - len(won), worker, (), scan=True)
        self._queued.claimed(count, min(len(won), count))
        return won

    async def _claim(
        self,
        count: int,
        worker: str,
        hints: Sequence[str],
        *,
        scan: bool,
        newcomers: bool = False,
        among: Sequence[str] | None = None,
        reserved: int = 0,
    ) -> list[Claim]:
        async with self._db.transaction() as conn:
            # Read before the lock (it serializes only what caps need), in the claim's own
            # transaction (one connection, no BEGIN and ROLLBACK of a read of its own): the
            # tenants that may have queued work, their limits and passes. None: the lock is
            # left to the others.
            if scan:
                began = self._queued.scanning()
                candidates = await self._reads.scan(conn)
                self._queued.scanned([] if candidates is None else candidates.names, began)
            else:
                names = self._queued.names if among is None else among
                candidates = await self._reads.known(conn, names, hints)
                if candidates is not None:
                    self._queued.joined(candidates.names)
            if candidates is None:
                return []
            await self._db.dialect.begin_claim(conn, serialize=candidates.capped)
            # Under the lock, counted again: what every earlier claim left. Without a cap the
            # counts read with the tenants only order them.
            running = await _running(conn) if candidates.capped else candidates.running
            budget = count + reserved
            if candidates.global_cap is not None:
                budget = min(budget, candidates.global_cap - sum(running.values()))
            if budget <= 0:
                return []
            loads = candidates.loads(running)
            if newcomers:
                loads = first_of_each(loads)
            allocation, rows = await self._choose(
                conn, loads, min(budget, count), max(0, budget - count), candidates.vtime, worker
            )
            won = await self._open(conn, rows)
            await self._advance(conn, allocation, candidates.vtime, [w.tenant for w in won])
        return won

    def announced(self, tenants: list[str] | None) -> None:
        """Tenants with new queued work, as a gateway announced them; None: announcements may
        have been lost, so the next claim scans."""
        if tenants is None:
            self._queued.expire()
        else:
            self._queued.announced(tenants)

    def none_seen_queued(self) -> bool:
        """Whether this process's last scan found no queued work, and nothing was announced or
        read since. A claim that starts fewer than it asked for scans, so right after one this
        tells "nothing claimable" from "queued, but held back" (a cap, a session's turn, a
        backoff)."""
        return self._queued.empty()

    def may_have_newcomers(self, running_here: Collection[str], more_than: int = 0) -> bool:
        """Whether a ``newcomers`` claim may find work (for more than ``more_than`` tenants), as
        far as this process knows without a read (:meth:`QueuedTenants.may_list_newcomers`)."""
        return self._queued.may_list_newcomers(running_here, more_than)

    async def claim_ids(self, invocation_ids: Sequence[str], worker: str) -> list[Claim | None]:
        """Start these invocations where each is queued, heads its session and its tenant and
        the deployment are under their caps; one result per id (a repeat gets None). For an
        operator or a test that means one invocation; workers take :meth:`claim_next`."""
        async with self._db.transaction() as conn:
            await self._db.dialect.begin_claim(conn, serialize=True)
            running = await _running(conn)
            global_cap = await _global_cap(conn)
            rows = await conn.execute(
                sa.select(inv.id, inv.tenant).where(
                    inv.id.in_(list(invocation_ids)), status_is(inv.status, Status.QUEUED), turn()
                )
            )
            tenant_of = {r.id: r.tenant for r in rows}
            limits = await effective_limits(conn, sorted(set(tenant_of.values())))
            total = sum(running.values())
            admitted: list[str] = []
            for invocation_id in dict.fromkeys(invocation_ids):
                tenant = tenant_of.get(invocation_id)
                if tenant is None or (global_cap is not None and total >= global_cap):
                    continue
                cap = limits[tenant].max_active
                if cap is not None and running.get(tenant, 0) >= cap:
                    continue
                running[tenant] = running.get(tenant, 0) + 1
                total += 1
                admitted.append(invocation_id)
            queued = sa.and_(inv.id.in_(admitted), status_is(inv.status, Status.QUEUED))
            flip = self._heads.flip(queued) if admitted else None
            flipped = (
                (await conn.execute(flip, {"worker": worker})).all() if flip is not None else []
            )
            won = {c.invocation_id: c for c in await self._open(conn, flipped)}
        seen: set[str] = set()
        results: list[Claim | None] = []
        for invocation_id in invocation_ids:
            results.append(None if invocation_id in seen else won.get(invocation_id))
            seen.add(invocation_id)
        return results

    async def _choose(
        self,
        conn: Connection,
        loads: list[TenantLoad],
        budget: int,
        reserved: int,
        vtime: float,
        worker: str,
    ) -> tuple[Allocation, list[Any]]:
        """The fair allocation (``reserved``: :func:`allocate_reserving`'s), and the rows it
        started (flipped to ``active``), in its order. Each round flips the heads the allocation
        wants in one statement; a tenant that had fewer than it was given (session-blocked, in
        backoff, drained) is known to have only what it gave, and the allocation is made again
        for the slots left."""
        known: dict[str, int] = {}
        started: dict[str, list[Any]] = {}
        allocation = allocate_reserving(loads, budget, reserved, vtime, known)
        for _ in range(MAX_ROUNDS):
            more = {
                t: n - len(started.get(t, ()))
                for t, n in wanted(allocation).items()
                if n > len(started.get(t, ()))
            }
            if not more:
                break
            found = await self._heads.start(conn, more, worker)
            short = False
            for tenant, n in more.items():
                rows = started.setdefault(tenant, [])
                rows += found.get(tenant, [])
                if len(found.get(tenant, ())) < n:
                    known[tenant] = len(rows)
                    short = True
            if not short:  # every tenant gave what it was given: the allocation stands
                break
            allocation = allocate_reserving(loads, budget, reserved, vtime, known)
        taken: dict[str, int] = {}
        ordered: list[Any] = []
        for tenant in allocation.picks:
            n = taken.get(tenant, 0)
            if n < len(started.get(tenant, ())):
                ordered.append(started[tenant][n])
                taken[tenant] = n + 1
        return allocation, ordered

    async def _open(self, conn: Connection, rows: Sequence[Any]) -> list[Claim]:
        """Open the logs of the attempts just started: their ``run.started`` (or
        ``run.resumed``) events, in one statement."""
        if not rows:
            return []
        started = {r.id: numbered(r.last_event_id, [opening(r)]) for r in rows}
        await insert_events(conn, self._db.dialect, started)
        return [_claim(r) for r in rows]

    async def _advance(
        self, conn: Connection, allocation: Allocation, vtime: float, served: list[str]
    ) -> None:
        """Store the passes of the tenants served (in name order: concurrent uncapped claims
        take these row locks in one order) and the virtual time, if it moved."""
        if served:
            rows = [(t, allocation.passes[t]) for t in sorted(set(served))]
            await conn.execute(
                self._store_passes, PASSES.params(rows, carriage=self._db.dialect.carriage)
            )
        if allocation.vtime != vtime:
            await conn.execute(self._store_clock, {"id": 1, "vtime": allocation.vtime})

    @cached_property
    def _store_passes(self) -> sa.Insert:
        """The passes' upsert, one statement whatever their number (a row a statement, in a
        pipeline, was a quarter of a claim's CPU over 8 tenants), built once (building it on
        every claim was 1.5 % of ``tether dev``'s CPU under a burst)."""
        batch = PASSES.cte(self._db.dialect.carriage)
        rows = sa.select(batch.c.tenant, batch.c["pass"]).where(sa.true()).order_by(batch.c.tenant)
        insert = self._db.dialect.upsert(tenant_passes).from_select(["tenant", "pass"], rows)
        upsert: sa.Insert = insert.on_conflict_do_update(
            index_elements=["tenant"], set_={"pass": insert.excluded["pass"]}
        )
        return upsert

    @cached_property
    def _store_clock(self) -> Any:
        return self._db.dialect.upsert_on(claim_clock, "id")


async def _running(conn: Connection) -> dict[str, int]:
    """Running attempts per tenant (the ``tenant_active`` index: one entry per attempt)."""
    rows = await conn.execute(
        sa.select(inv.tenant, sa.func.count())
        .where(status_is(inv.status, Status.ACTIVE))
        .group_by(inv.tenant)
    )
    return {r[0]: int(r[1]) for r in rows}


async def _global_cap(conn: Connection) -> int | None:
    cap = await conn.scalar(sa.select(global_limits.c.max_active))
    return None if cap is None else int(cap)


def _claim(r: Any) -> Claim:
    return Claim(
        r.id,
        r.attempt,
        r.input,
        r.session_id,
        r.checkpoint,
        r.last_event_id,
        r.resumed_by,
        r.owner,
        bool(r.user_auth),
        r.tenant,
    )
