"""Durable execution's rows: recorded steps, waits, and waking.

A handler's ``ctx.step`` results and ``ctx.sleep`` / ``ctx.wait_for_input`` waits are rows keyed
by ``(invocation, name)``. Parking ends the attempt (:mod:`.parks`): in one fenced transaction
the waits are written, the invocation goes ``active → waiting`` (holding no worker, no heartbeat)
and ``run.waiting`` is appended. Whoever resolves a wait (a client's input, or a due timer)
flips the invocation ``waiting → queued`` in the same transaction, conditionally, so exactly one
of them wins and exactly one resumed attempt is claimed. Times come from the database clock.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from tether.jsonvalue import same_value
from tether.outcomes import wait_entry
from tether.store.attempts import fence
from tether.store.connection import Connection
from tether.store.engine import Database
from tether.store.schema import RESUME, Status, invocations, status_is, steps, waits

inv = invocations.c


class WaitKind(StrEnum):
    INPUT = "input"
    SLEEP = "sleep"


class Resolution(StrEnum):
    INPUT = "input"
    TIMEOUT = "timeout"
    ELAPSED = "elapsed"


@dataclass(frozen=True, slots=True)
class StepRecord:
    name: str
    result: Any
    error_type: str | None


@dataclass(frozen=True, slots=True)
class WaitRecord:
    name: str
    kind: WaitKind
    details: dict[str, Any]
    wake_at: float | None
    value: Any
    resolution: Resolution | None

    @property
    def resolved(self) -> bool:
        return self.resolution is not None

    def entry(self) -> dict[str, Any]:
        """How clients see this wait in ``waiting_for``."""
        return wait_entry(self.name, self.kind.value, self.details, self.wake_at)


@dataclass(frozen=True, slots=True)
class Recorded:
    """Everything earlier attempts of one invocation recorded, read once per attempt."""

    steps: dict[str, StepRecord] = field(default_factory=dict)
    waits: dict[str, WaitRecord] = field(default_factory=dict)
    now: float = 0.0
    """The database clock when this was read (sleeps are measured against it)."""
    last: frozenset[str] = frozenset()
    """The names of the records made last (a step, or a resolved wait: the one an attempt parked
    on); one unless several were made at the same moment. An attempt whose replay has reached
    them all is past everything earlier attempts emitted, even if a record before them is never
    reached again (a step renamed in a new version of the code runs again under its new name)."""


@dataclass(frozen=True, slots=True)
class NewWait:
    name: str
    kind: WaitKind
    details: dict[str, Any]
    wake_in: float | None
    """Seconds from now (database clock) until the wait resolves by itself; None: never."""


class CancelPending(Exception):
    """The attempt may not park: its invocation's cancel was requested. It ends ``cancelled``
    instead (nothing was written), so the cancel is not left on a waiting invocation that no
    worker holds."""


class InputAnswer(StrEnum):
    """What ``resolve_input`` did."""

    RESUMED = "resumed"
    """The value was recorded and the invocation queued again."""
    ALREADY = "already"
    """The same value was recorded before: nothing changed (idempotent)."""
    CONFLICT = "conflict"
    """The wait was resolved with another value."""
    TIMED_OUT = "timed_out"
    """The wait's timeout has passed (its timer may not have fired yet): too late for a value."""
    NOT_WAITING = "not_waiting"
    """The wait exists but the invocation is not parked on it."""
    UNKNOWN = "unknown"
    """No such input wait."""


class Journal:
    """The queries behind durable execution, over the store's engine and database clock."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._now = db.now

    async def load(self, invocation_id: str) -> Recorded:
        async with self._db.connection() as conn:
            step_rows = (
                await conn.execute(
                    sa.select(
                        steps.c.name, steps.c.result, steps.c.error_type, steps.c.created_at
                    ).where(steps.c.invocation_id == invocation_id)
                )
            ).all()
            wait_rows = (
                await conn.execute(sa.select(waits).where(waits.c.invocation_id == invocation_id))
            ).all()
            now = float(await conn.scalar(sa.select(self._now)) or 0.0)
            made = [(r.name, r.created_at) for r in step_rows]
            made += [(r.name, r.created_at) for r in wait_rows if r.resolution is not None]
            return Recorded(
                steps={r.name: StepRecord(r.name, r.result, r.error_type) for r in step_rows},
                waits={r.name: _wait(r) for r in wait_rows},
                now=now,
                last=made_last(made),
            )

    async def record_step(
        self, invocation_id: str, attempt: int, name: str, result: Any, error_type: str | None
    ) -> bool:
        """Record a finished step under the attempt's fence; False if the attempt was superseded.

        A row already there (an earlier attempt recorded it just before dying) wins: the first
        recorded value is the one every replay returns. The fence holds the invocation's row
        (``FOR SHARE``) until the record commits, so the attempt cannot be replaced between
        them: a replacement claimed meanwhile would not replay this record."""
        fenced = sa.select(sa.literal(1)).where(*fence(invocation_id, attempt))
        fenced = fenced.with_for_update(read=True)
        async with self._db.transaction() as conn:
            if await conn.scalar(fenced) is None:
                return False
            await conn.execute(
                self._db.dialect.insert_new(steps, "invocation_id", "name").values(
                    invocation_id=invocation_id,
                    name=name,
                    result=result,
                    error_type=error_type,
                    attempt=attempt,
                    created_at=self._now,
                )
            )
        return True

    async def waiting_for(self, invocation_ids: Sequence[str]) -> dict[str, list[WaitRecord]]:
        """The unresolved waits of each invocation, oldest first."""
        if not invocation_ids:
            return {}
        async with self._db.connection() as conn:
            rows = await conn.execute(
                sa.select(waits)
                .where(
                    waits.c.invocation_id.in_(list(invocation_ids)), waits.c.resolved_at.is_(None)
                )
                .order_by(waits.c.created_at, waits.c.name)
            )
            found: dict[str, list[WaitRecord]] = {}
            for row in rows:
                found.setdefault(row.invocation_id, []).append(_wait(row))
            return found

    async def resolve_input(self, invocation_id: str, name: str, value: Any) -> InputAnswer:
        """Record a client's value for an input wait and queue the invocation again."""
        async with self._db.transaction() as conn:
            due = (waits.c.wake_at <= self._now).label("due")
            query = sa.select(waits, due).where(
                waits.c.invocation_id == invocation_id,
                waits.c.name == name,
                waits.c.kind == WaitKind.INPUT.value,
            )
            row = (await conn.execute(query.with_for_update())).first()
            if row is None:
                return InputAnswer.UNKNOWN
            if row.resolution == Resolution.TIMEOUT or (row.resolution is None and row.due):
                return InputAnswer.TIMED_OUT  # a due timeout is the timer's to resolve
            if row.resolution is not None:
                same = row.resolution == Resolution.INPUT and same_value(row.value, value)
                return InputAnswer.ALREADY if same else InputAnswer.CONFLICT
            resumed = await self._resume(conn, [invocation_id])
            if not resumed:
                return InputAnswer.NOT_WAITING
            await conn.execute(
                sa.update(waits)
                .where(
                    waits.c.invocation_id == invocation_id,
                    waits.c.name == name,
                    waits.c.resolved_at.is_(None),
                )
                .values(value=value, resolution=Resolution.INPUT.value, resolved_at=self._now)
            )
        return InputAnswer.RESUMED

    @functools.cached_property
    def _due(self) -> sa.Select[Any]:
        """The due timers of parked invocations, soonest first, ``:limit`` of them, locked: one
        statement for every pass (each node's, every ``timers.timer_poll``), so it runs as a
        plan of its own (:mod:`.plans`) instead of being compiled anew each time."""
        return (
            sa.select(waits.c.invocation_id, waits.c.name)
            .join(invocations, inv.id == waits.c.invocation_id)
            .where(
                waits.c.resolved_at.is_(None),
                waits.c.wake_at <= self._now,
                status_is(inv.status, Status.WAITING),
            )
            .order_by(waits.c.wake_at)
            .limit(sa.bindparam("limit", type_=sa.Integer))
            .with_for_update(of=waits, skip_locked=True)  # (SQLite: one writer anyway)
        )

    async def fire_due(self, limit: int = 500) -> list[str]:
        """Resolve every due timer of a parked invocation (a sleep has elapsed, an input wait
        timed out) and queue those invocations again; returns their ids."""
        async with self._db.transaction() as conn:
            rows = (await conn.execute(self._due, {"limit": limit})).all()
            if not rows:
                return []
            keys = [(r.invocation_id, r.name) for r in rows]
            await conn.execute(
                sa.update(waits)
                .where(
                    sa.tuple_(waits.c.invocation_id, waits.c.name).in_(keys),
                    waits.c.resolved_at.is_(None),
                )
                .values(
                    resolution=sa.case(
                        (waits.c.kind == WaitKind.SLEEP.value, Resolution.ELAPSED.value),
                        else_=Resolution.TIMEOUT.value,
                    ),
                    resolved_at=self._now,
                )
            )
            return await self._resume(conn, sorted({r.invocation_id for r in rows}))

    async def _resume(self, conn: Connection, invocation_ids: list[str]) -> list[str]:
        rows = await conn.execute(
            sa.update(invocations)
            .where(inv.id.in_(invocation_ids), status_is(inv.status, Status.WAITING))
            .values(status=Status.QUEUED.value, resumed_by=RESUME, enqueued_at=self._now)
            .returning(inv.id)
        )
        return [str(r.id) for r in rows]


def made_last(made: Sequence[tuple[str, float]]) -> frozenset[str]:
    """The names, of ``(name, created_at)`` records, made at the latest time."""
    latest = max((at for _, at in made), default=None)
    return frozenset(name for name, at in made if at == latest)


def _wait(row: Any) -> WaitRecord:
    return WaitRecord(
        name=row.name,
        kind=WaitKind(row.kind),
        details=dict(row.details or {}),
        wake_at=row.wake_at,
        value=row.value,
        resolution=None if row.resolution is None else Resolution(row.resolution),
    )
