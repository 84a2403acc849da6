"""Who could run next: the tenants with queued work, with their limits, passes and running
attempts, the virtual time and the global cap, in one read at the start of every claim.

Finding the tenants with queued work is a loose index scan of ``tenant_queue``: one probe per
such tenant, whatever the backlog, but still a cost that grows with the tenants (about 1 ms per
200 on the reference machine, a claim's largest statement). So each process keeps the list it
last found (:class:`QueuedTenants`) and, while its claims fill every slot they ask for from it,
reads only those tenants (on SQLite, those of them that still have queued work:
:func:`known_tenants`), the tenants of the tokens in hand (``hints``: the invocation ids the
Dramatiq messages carry) and the tenants the gateways announced
(:func:`tether.pubsub.announce_queued`: a token may wait behind another tenant's flood in the
broker's FIFO, an announcement does not) for up to :data:`RESCAN` seconds. A claim scans again:

- when the list is older than :data:`RESCAN`, so a tenant whose every token went to other
  processes is seen by this one within that time;
- when the last claim came up short (fewer started than asked): the backlog is shallow, and a
  scan is cheap there and finds what the list lacks;
- and at once, within the same claim, when a claim from the list comes up short.

A tenant's new work is therefore seen at the next claim of every process once it is announced
(or its token arrives), and within :data:`RESCAN` when the announcement was lost (pub/sub is never
the truth; work queued again by a resume or the reaper is not announced). Limits, passes and
running counts are read by every claim, so a change applies at the next one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import sqlalchemy as sa

from tether.store.connection import Connection
from tether.store.dialect import Dialect
from tether.store.fairness import TenantLoad
from tether.store.tenants import DEFAULTS, FIELDS, TenantLimits, effective_from, limits_from

RESCAN = 0.25
"""Seconds a process claims from the tenant list it last scanned before it scans again."""

LOOSE_SCAN = """
    WITH RECURSIVE queued(tenant) AS (
        SELECT min(tenant) FROM tether_invocations WHERE status = 'queued'
        UNION ALL
        SELECT (SELECT min(i.tenant) FROM tether_invocations i
                WHERE i.status = 'queued' AND i.tenant > queued.tenant)
        FROM queued WHERE queued.tenant IS NOT NULL
    )
"""
"""The tenants with queued work: a loose index scan of ``tether_invocations_tenant_queue``,
one probe per tenant (a ``DISTINCT`` would read the whole backlog)."""


def known_tenants(dialect: Dialect) -> str:
    """The tenants named in ``:names`` and those of the still queued invocations in ``:hints``
    (both JSON arrays of strings). Where probes are cheap (:attr:`Dialect.probes_listed_tenants`)
    only the named tenants that still have queued work, one probe of an index of the queued
    rows each.

    The list outlives the queues it names: under a burst from many owners it holds every tenant
    announced lately, most of them drained by the time a claim reads it. Read as candidates,
    drained tenants were given slots first (as low on passes as anyone), found empty one round
    of the heads statement after another, and weighed in every allocation: with the probes,
    ``tether dev`` spent 7 % less CPU on a burst of 2,000 from 256 owners (five interleaved
    runs each, 0.97 -> 0.90 ms per invocation). On PostgreSQL a probe is a buffer access
    (~3.5 us): at 500,000 queued, where every listed tenant has work, 200 of them made the read
    0.31 -> 1.0 ms and the claim rate 0.88 -> 0.77 of the empty system's, so it reads the list
    as it is."""
    names, hints = dialect.json_texts("names"), dialect.json_texts("hints")
    listed = "SELECT tenant FROM named"
    if dialect.probes_listed_tenants:
        listed += """
        WHERE EXISTS (SELECT 1 FROM tether_invocations i
                      WHERE i.tenant = named.tenant AND i.status = 'queued')"""
    return f"""
    WITH named(tenant) AS ({names}),
    queued(tenant) AS (
        {listed}
        UNION
        SELECT tenant FROM tether_invocations WHERE id IN ({hints}) AND status = 'queued'
    )
    """


READ = """
    SELECT queued.tenant AS queued_tenant, p.pass AS stored_pass, r.running,
           (SELECT vtime FROM tether_claim_clock) AS vtime,
           (SELECT max_active FROM tether_global_limits) AS global_cap,
           {own}, {fallback}
    FROM queued
    LEFT JOIN tether_tenant_passes p ON p.tenant = queued.tenant
    LEFT JOIN (SELECT tenant, count(*) AS running FROM tether_invocations
               WHERE status = 'active' GROUP BY tenant) r ON r.tenant = queued.tenant
    LEFT JOIN tether_tenants t ON t.tenant = queued.tenant
    LEFT JOIN tether_tenants d ON d.tenant = '{defaults}'
    WHERE queued.tenant IS NOT NULL
""".format(
    own=", ".join(f"t.{c} AS own_{c}" for c in ("tenant", *FIELDS)),
    fallback=", ".join(f"d.{c} AS default_{c}" for c in ("tenant", *FIELDS)),
    defaults=DEFAULTS,
)
"""For each tenant of the ``queued`` CTE: its pass, running attempts and own limits, with the
defaults row, the virtual time and the global cap on every row."""


@dataclass(frozen=True, slots=True)
class Candidates:
    """The tenants that may have queued work, with their limits and passes, and the global
    cap."""

    names: list[str]
    limits: dict[str, TenantLimits]
    passes: dict[str, float]
    running: dict[str, int]
    vtime: float
    global_cap: int | None
    capped: bool
    """Whether a cap applies to any of them: only then must claims take turns."""

    def loads(self, running: dict[str, int]) -> list[TenantLoad]:
        limits, passes = self.limits, self.passes
        return [
            TenantLoad(t, running.get(t, 0), limits[t].weight, limits[t].max_active, passes.get(t))
            for t in self.names
        ]


class QueuedTenants:
    """This process's list of the tenants with queued work, as its last scan found it, and
    whether claims from it still fill what they ask for."""

    def __init__(self, rescan: float = RESCAN, clock: Callable[[], float] = time.monotonic):
        self._rescan = rescan
        self._clock = clock
        self._names: dict[str, None] = {}
        """The tenants, in the order they came (a dict: joining checks membership at once)."""
        self._scanned_at = float("-inf")
        self._announced: dict[str, float] = {}
        """Tenants announced since the last scan began, with when: a scan that read the
        database before their work was committed must not drop them."""
        self._deep = False
        """Whether the last claim started as many as it asked for."""

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def fresh(self) -> bool:
        """Whether a claim may read the list instead of scanning."""
        return self._deep and not self.stale()

    def stale(self) -> bool:
        """Whether the last scan is older than the rescan interval."""
        return self._clock() - self._scanned_at >= self._rescan

    def scanning(self) -> float:
        """A scan begins: when, for :meth:`scanned`."""
        return self._clock()

    def scanned(self, names: list[str], began: float) -> None:
        """The scan that began at ``began`` found ``names``; announcements since it began stay."""
        self._announced = {t: at for t, at in self._announced.items() if at >= began}
        self._names, self._scanned_at = dict.fromkeys(names), began
        self.joined(list(self._announced))

    def joined(self, names: list[str]) -> None:
        """Tenants read through hints: kept until the next scan."""
        self._names.update(dict.fromkeys(names))

    def announced(self, names: list[str]) -> None:
        """Tenants a gateway announced new work for: kept until the next scan after this."""
        now = self._clock()
        self._announced.update(dict.fromkeys(names, now))
        self.joined(names)

    def expire(self) -> None:
        """Announcements may have been missed (pub/sub reconnected): the next claim scans."""
        self._scanned_at = float("-inf")

    def claimed(self, asked: int, started: int) -> None:
        self._deep = started >= asked

    def empty(self) -> bool:
        """Whether the list names no tenant: the last scan found no queued work, and no tenant
        was announced or read through a hint since."""
        return not self._names

    def may_list_newcomers(self, running_here: Collection[str], more_than: int = 0) -> bool:
        """Whether more than ``more_than`` tenants with nothing running may have queued work, as
        far as this process knows without a read: the list is stale, or names that many tenants
        not running here."""
        if self.stale():
            return True
        for name in self._names:
            if name not in running_here:
                more_than -= 1
                if more_than < 0:
                    return True
        return False


class CandidateReads:
    """The two reads (scan or list) as statements compiled once per dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self._scan = sa.text(LOOSE_SCAN + READ)
        self._known = sa.text(known_tenants(dialect) + READ)

    async def scan(self, conn: Connection) -> Candidates | None:
        """None when nothing is queued."""
        return _candidates((await conn.execute(self._scan)).all())

    async def known(
        self, conn: Connection, names: Sequence[str], hints: Sequence[str]
    ) -> Candidates | None:
        """The tenants in ``names`` (those that still have queued work, where probes are
        cheap) and those of the queued invocations in ``hints``; None when there are none."""
        params = {"names": json.dumps(list(names)), "hints": json.dumps(list(hints))}
        return _candidates((await conn.execute(self._known, params)).all())


def _prefixed(row: Any, prefix: str) -> dict[str, Any]:
    return {c: getattr(row, prefix + c) for c in ("tenant", *FIELDS)}


def _candidates(rows: Sequence[Any]) -> Candidates | None:
    """The read's rows (one per tenant, by attribute: a claim reads every tenant with queued
    work, and a mapping a row cost more than the rest of this together)."""
    if not rows:
        return None
    rows = sorted(rows, key=attrgetter("queued_tenant"))
    names = [r.queued_tenant for r in rows]
    passes = {r.queued_tenant: float(r.stored_pass) for r in rows if r.stored_pass is not None}
    running = {r.queued_tenant: int(r.running) for r in rows if r.running}
    own = {
        r.own_tenant: limits_from(_prefixed(r, "own_")) for r in rows if r.own_tenant is not None
    }
    first = rows[0]
    fallback = (
        limits_from(_prefixed(first, "default_")) if first.default_tenant is not None else None
    )
    limits = effective_from(names, own, fallback)
    global_cap = None if first.global_cap is None else int(first.global_cap)
    return Candidates(
        names,
        limits,
        passes,
        running,
        float(first.vtime or 0.0),
        global_cap,
        capped=global_cap is not None or any(limits[t].max_active is not None for t in names),
    )
