"""The statements that start a claim's heads: each chosen tenant's first claimable
invocations (``priority DESC, seq``; not blocked by an older open invocation of their session,
not in a replacement's backoff), flipped to ``active`` by one statement (:mod:`tether.store.claims`
decides how many of each tenant's)."""

from __future__ import annotations

from functools import cached_property
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import ARRAY

from tether.store.bound import padded
from tether.store.connection import Connection
from tether.store.engine import Database
from tether.store.eventlog import advanced
from tether.store.schema import OPEN, Status, invocations, status_is

inv = invocations.c
UNION_BRANCHES = 256
"""Tenants per head statement on SQLite (one compound ``SELECT``; SQLite's holds at most 500
terms)."""


class HeadStarts:
    """One database's head statements, each built once (per number of branches on SQLite)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._union_starts: dict[int, sa.Update] = {}

    async def start(
        self, conn: Connection, counts: dict[str, int], worker: str
    ) -> dict[str, list[Any]]:
        """Flip the first ``counts[t]`` claimable invocations of each tenant ``t`` to
        ``active``, in one statement (on SQLite one per ``UNION_BRANCHES`` tenants); the rows
        flipped, per tenant in its order."""
        if self._db.dialect.lateral:
            params = {"worker": worker, "tenants": list(counts), "counts": list(counts.values())}
            rows = list((await conn.execute(self._lateral_start, params)).all())
        else:
            wanted = list(counts.items())
            rows = []
            for k in range(0, len(wanted), UNION_BRANCHES):
                rows += await self._union_rows(conn, wanted[k : k + UNION_BRANCHES], worker)
        found: dict[str, list[Any]] = {}
        for r in sorted(rows, key=lambda r: (-r.priority, r.seq)):
            found.setdefault(r.tenant, []).append(r)
        return found

    async def _union_rows(
        self, conn: Connection, wanted: list[tuple[str, int]], worker: str
    ) -> list[Any]:
        """One ``UNION ALL`` statement, padded with branches that match nothing (tenant NULL,
        count 0), so there are few texts to compile."""
        size = padded(len(wanted))
        heads: list[tuple[str | None, int]] = [*wanted, *[(None, 0)] * (size - len(wanted))]
        params: dict[str, Any] = {"worker": worker}
        for k, (tenant, n) in enumerate(heads):
            params[f"tenant_{k}"], params[f"count_{k}"] = tenant, n
        return list((await conn.execute(self._union_start(size), params)).all())

    def _head(self, tenant: sa.ColumnElement[str], limit: Any) -> sa.Select[Any]:
        return (
            sa.select(inv.id)
            .where(
                inv.tenant == tenant,
                status_is(inv.status, Status.QUEUED),
                inv.enqueued_at <= self._db.now,
                turn(),
            )
            .order_by(inv.priority.desc(), inv.seq)
            .limit(limit)
            .with_for_update(skip_locked=True, of=invocations)
        )

    @cached_property
    def _lateral_start(self) -> sa.Update:
        """One index probe per tenant in one plan (a ``LATERAL`` join over the tenants and
        counts given as two arrays), flipped by the same statement, so it is compiled once
        whatever they hold."""
        wanted = (
            sa.func.unnest(
                sa.bindparam("tenants", type_=ARRAY(sa.Text)),
                sa.bindparam("counts", type_=ARRAY(sa.Integer)),
            )
            .table_valued("tenant", "n")
            .render_derived(name="wanted")
        )
        heads = self._head(wanted.c.tenant, wanted.c.n).lateral("heads")
        # MATERIALIZED: chosen once. Inlined, the planner may run the locking probe again for
        # each row it updates, and each run skips the rows locked so far and takes more.
        chosen = (
            sa.select(heads.c.id)
            .select_from(wanted.join(heads, sa.true()))
            .cte("chosen")
            .prefix_with("MATERIALIZED")
        )
        # The ids as one array: PostgreSQL takes an array it cannot see when planning for ten
        # elements and looks them up by primary key, whatever the table's size or statistics.
        # As IN (SELECT ...) it knew there were 32 and, at 10,000 invocations, read them all
        # to join by hash.
        return self.flip(inv.id == sa.any_(sa.func.array(sa.select(chosen.c.id).scalar_subquery())))

    def _union_start(self, tenants: int) -> sa.Update:
        """Where there is no ``LATERAL`` (SQLite): one ``UNION ALL`` branch per tenant, its
        tenant and count bound as ``:tenant_k`` and ``:count_k``; built once per number of
        branches, a power of two (building it was a third of ``tether dev``'s CPU under a
        burst; one per tenant count still made up to 256 texts for SQLAlchemy and SQLite to
        compile, most of them used once). The branches are one compiled text repeated: built
        as expressions, the sizes up to 256 took 1.5 s of CPU to build and compile, paid
        in the first burst of each ``tether dev``."""
        start = self._union_starts.get(tenants)
        if start is None:
            branch = self._branch_text
            union = " UNION ALL ".join(
                branch.replace(":tenant_k", f":tenant_{k}").replace(":count_k", f":count_{k}")
                for k in range(tenants)
            )
            binds = [
                bind
                for k in range(tenants)
                for bind in (
                    sa.bindparam(f"tenant_{k}", type_=sa.Text),
                    sa.bindparam(f"count_{k}", type_=sa.Integer),
                )
            ]
            heads = sa.text(union).bindparams(*binds).columns(inv.id).subquery("heads")
            start = self._union_starts[tenants] = self.flip(inv.id.in_(sa.select(heads.c.id)))
        return start

    @cached_property
    def _branch_text(self) -> str:
        """One tenant's head as SQLite text, its tenant and count bound as ``:tenant_k`` and
        ``:count_k`` (the offset written in: SQLite's ``LIMIT`` otherwise binds one)."""
        head = self._head(sa.bindparam("tenant_k"), sa.bindparam("count_k"))
        subquery = head.offset(sa.literal_column("0")).subquery("head")
        compiled = sa.select(subquery.c.id).compile(dialect=sqlite.dialect(paramstyle="named"))
        assert set(compiled.params) == {"tenant_k", "count_k"}, compiled.params
        return str(compiled)

    def flip(self, which: sa.ColumnElement[bool]) -> sa.Update:
        """Flip the invocations ``which`` selects to ``active`` for the worker bound as
        ``:worker``, returning what their attempts need. ``which`` says they are queued: the
        head statements by selecting them queued in the same statement (on PostgreSQL under
        their row locks), :meth:`~tether.store.claims.Claims.claim_ids` by stating it.

        The head statements find the rows by id alone: with ``status = 'queued'`` here too,
        PostgreSQL could scan the queued rows through a partial index on them instead of
        looking the ids up, and did whenever it believed few were queued (believing 739 where
        there were 50,000: 14 ms a claim, reading 49,000 index entries)."""
        return (
            sa.update(invocations)
            .where(which)
            .values(
                status=Status.ACTIVE.value,
                attempt=inv.attempt + 1,
                started_at=sa.func.coalesce(inv.started_at, self._db.now),
                heartbeat_at=self._db.now,
                worker=sa.bindparam("worker", type_=sa.Text),
                last_event_id=advanced(1),
            )
            .returning(
                inv.id,
                inv.attempt,
                inv.input,
                inv.session_id,
                inv.checkpoint,
                inv.last_event_id,
                inv.resumed_by,
                inv.owner,
                inv.user_auth,
                inv.tenant,
                inv.priority,
                inv.seq,
            )
        )


def turn() -> sa.ColumnElement[bool]:
    """The invocation's session has no older open invocation (or it has no session)."""
    older = invocations.alias("older")
    blocked_by_older = sa.exists().where(
        older.c.owner == inv.owner,
        older.c.session_id == inv.session_id,
        older.c.seq < inv.seq,
        status_is(older.c.status, *OPEN),
    )
    return sa.or_(inv.session_id.is_(None), ~blocked_by_older)
