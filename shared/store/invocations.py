"""The gateway's side of the store: accepting and cancelling invocations, and every read."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache, partial
from typing import Any

import sqlalchemy as sa

from tether.jsonvalue import InvalidJson, check_text, checked, encoded, storable_text
from tether.outcomes import cancelled
from tether.store.batching import write_batch
from tether.store.bound import BoundBatch, Carriage
from tether.store.connection import Connection
from tether.store.dialect import Dialect
from tether.store.endings import Ending, write_endings
from tether.store.engine import Database
from tether.store.errors import (
    Conflict,
    OwnerLimitReached,
    StoreError,
    TenantLimitReached,
    ValueRefused,
)
from tether.store.opencounts import (
    OWNER,
    TENANT,
    Key,
    RecountPace,
    add_open,
    changes,
    correct,
)
from tether.store.schema import (
    INVOCATION_COLUMNS,
    TERMINAL_VALUES,
    Invocation,
    NewInvocation,
    Status,
    invocations,
    status_is,
)
from tether.store.writes import Accepted, Finished

inv = invocations.c
CANCEL_ROUNDS = 3
"""How often a cancel looks again at an invocation that changed status under it."""
Refused = OwnerLimitReached | TenantLimitReached
AcceptResult = Accepted | Conflict | Refused | StoreError
"""What accepting one request gives: the invocation, or what to raise for that request alone
(:class:`ValueRefused` for a value no column can hold: the client's error)."""


class Invocations:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._recounts = RecountPace()

    async def accept_many(
        self,
        batch: Sequence[NewInvocation],
        *,
        max_open_per_owner: int = 0,
        max_queued: Mapping[str, int] | None = None,
    ) -> list[AcceptResult]:
        """Insert new invocations, or find the existing one of a repeated request: one result
        per request, in order. A request refused by validation or by the database fails alone.
        Both caps count open (queued, running, waiting) invocations: the owner's (0: none),
        and each tenant's of ``max_queued`` (a tenant not named there has no cap)."""
        ready = [storable(new) for new in batch]  # each encoded, or refused
        valid = [new for new in ready if isinstance(new, NewInvocation)]
        caps = OpenCaps(max_open_per_owner, dict(max_queued or {}))
        write = partial(self._accept, caps)
        written = iter(await write_batch(valid, lambda new: new.id, write))
        return [next(written) if isinstance(new, NewInvocation) else new for new in ready]

    async def _accept(
        self, caps: OpenCaps, batch: Sequence[NewInvocation], alone: bool
    ) -> dict[int, Accepted | Conflict | Refused]:
        news = {new.id: new for new in batch}
        dialect = self._db.dialect
        async with self._db.transaction() as conn:
            values = [_row(new) for new in batch]
            new_rows = NEW_ROWS.params(values, carriage=dialect.carriage)  # may refuse
            inserted = await conn.execute(_insert_statement(dialect), new_rows)
            created = {r.id: _queued(news[r.id], r.seq, r.created_at) for r in inserted}
            others = [new.id for new in batch if new.id not in created]
            existing: dict[str, Invocation] = {}
            if others:
                rows = await conn.execute(sa.select(*INVOCATION_COLUMNS).where(inv.id.in_(others)))
                existing = {row["id"]: Invocation.from_row(row) for row in rows.mappings()}
            opened = [new for new in batch if new.id in created]
            counts = await add_open(conn, dialect, changes(map(_counted, opened), +1))
            refused = caps.over(counts, opened)
            if refused and (stale := self._recounts.due(_refused_keys(opened, refused))):
                counts.update(await correct(conn, counts, stale))  # drifted? not for good
                refused = caps.over(counts, opened)
            if refused:  # as if rolled back: nobody ever saw these rows
                await conn.execute(sa.delete(invocations).where(inv.id.in_(list(refused))))
                gone = (_counted(new) for new in opened if new.id in refused)
                await add_open(conn, dialect, changes(gone, -1))
        verdicts = {n: _verdict(new, created, refused, existing) for n, new in enumerate(batch)}
        return {n: verdict for n, verdict in verdicts.items() if verdict is not None}

    async def request_cancel(self, invocation_id: str) -> Finished | None:
        """Cancel a queued or waiting invocation at once, or flag an active one for its worker.

        Returns the terminal transition when it was cancelled here. Each statement sees what was
        committed when it began: an attempt that parks between them (the ending saw it
        ``active``, the flag then finds it ``waiting``) is looked at again, so the cancel cannot
        fall between the two.
        """
        async with self._db.transaction() as conn:
            for _ in range(CANCEL_ROUNDS):
                for status in (Status.QUEUED, Status.WAITING):  # no worker holds it: end it here
                    ending = Ending(invocation_id, cancelled(), from_status=status)
                    [finished] = await write_endings(conn, self._db.dialect, [ending])
                    if finished is not None:
                        return finished
                flagged = await conn.execute(
                    sa.update(invocations)
                    .where(inv.id == invocation_id, status_is(inv.status, Status.ACTIVE))
                    .values(cancel_requested=True)
                )
                if flagged.rowcount:
                    return None
                status_now = await conn.scalar(sa.select(inv.status).where(inv.id == invocation_id))
                if status_now is None or status_now in TERMINAL_VALUES:
                    return None
        return None

    async def get(self, invocation_id: str) -> Invocation | None:
        async with self._db.connection() as conn:
            return await _get(conn, invocation_id)

    async def input_of(self, invocation_id: str) -> Any:
        """What was asked (None for no such invocation): read only where an answer depends on
        it, as a cancel's on an agent turn's agent."""
        async with self._db.connection() as conn:
            query = sa.select(inv.input).where(inv.id == invocation_id)
            return (await conn.execute(query)).scalar()

    async def get_many(self, invocation_ids: Sequence[str]) -> list[Invocation | None]:
        """Each id's invocation, in order, from one statement (None where there is none)."""
        if not invocation_ids:
            return []
        carriage = self._db.dialect.carriage
        wanted = [(i,) for i in dict.fromkeys(invocation_ids) if storable_text(i)]  # else no row
        async with self._db.connection() as conn:
            params = WANTED_IDS.params(wanted, carriage=carriage)
            rows = (await conn.execute(_by_ids(carriage), params)).mappings().all()
        found = {row["id"]: Invocation.from_row(row) for row in rows}
        return [found.get(invocation_id) for invocation_id in invocation_ids]

    async def list_owned(
        self,
        owner: str,
        *,
        status: Status | None = None,
        session_id: str | None = None,
        before_seq: int | None = None,
        limit: int = 50,
    ) -> list[Invocation]:
        """The owner's invocations, newest first, ``before_seq`` as the page cursor."""
        query = sa.select(*INVOCATION_COLUMNS).where(inv.owner == owner)
        if status is not None:
            query = query.where(inv.status == status.value)
        if session_id is not None:
            query = query.where(inv.session_id == session_id)
        if before_seq is not None:
            query = query.where(inv.seq < before_seq)
        query = query.order_by(inv.seq.desc()).limit(limit)
        async with self._db.connection() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [Invocation.from_row(r) for r in rows]

    async def count_queued(self) -> int:
        async with self._db.connection() as conn:
            query = sa.select(sa.func.count()).where(status_is(inv.status, Status.QUEUED))
            return int(await conn.scalar(query) or 0)


def storable(new: NewInvocation) -> NewInvocation | ValueRefused:
    """``new`` with its input encoded once, for the insert to bind as it is
    (:class:`~tether.jsonvalue.JsonText`: the text the gateway's request hash encoded, in
    ``input_text``, else encoded here; a 67 kB conversation takes ~0.4 ms to encode); or what
    no column could hold (NUL, a lone surrogate, NaN, …), refused before the request joins a
    batch, with a message for its client."""
    checking = "owner"
    try:
        check_text(new.owner)
        checking = "session_id"
        check_text(new.session_id or "")
        checking = "input"
        text = encoded(new.input) if new.input_text is None else checked(new.input_text)
        return replace(new, input=text, input_text=None)
    except InvalidJson as exc:
        message = f"{checking}: {exc}"
        return ValueRefused(message, message)


def _verdict(
    new: NewInvocation,
    created: dict[str, Invocation],
    refused: dict[str, Refused],
    existing: dict[str, Invocation],
) -> Accepted | Conflict | Refused | None:
    """What became of the request; None if its row vanished (deleted by retention between the
    two statements): it is written again."""
    if new.id in refused:
        return refused[new.id]
    if new.id in created:
        return Accepted(created[new.id], created=True)
    found = existing.get(new.id)
    if found is None:
        return None
    if found.owner != new.owner or found.request_hash != new.request_hash:
        return Conflict(new.id)
    return Accepted(found, created=False)


@dataclass(frozen=True, slots=True)
class OpenCaps:
    """The caps on open invocations an accept enforces: one rule, over the counts by owner and
    by tenant (:mod:`.opencounts`)."""

    per_owner: int
    """0: none."""
    per_tenant: dict[str, int]
    """Tenants without an entry have no cap; 0 refuses every new invocation."""

    def over(
        self, counts: Mapping[Key, int], opened: Sequence[NewInvocation]
    ) -> dict[str, Refused]:
        """Rows just ``opened`` (``counts``: the open counts with them) that put their owner
        or tenant over its cap, the latest of the batch first, with why."""
        refused: dict[str, Refused] = {}
        if self.per_owner:
            by_owner = _beyond(opened, counts, OWNER, lambda n: n.owner, {}, self.per_owner, {})
            refused.update({i: OwnerLimitReached(o) for i, o in by_owner.items()})
        capped = [n for n in opened if n.tenant_or_owner in self.per_tenant]
        if capped:
            by_tenant = _beyond(
                capped, counts, TENANT, lambda n: n.tenant_or_owner, self.per_tenant, 0, refused
            )
            refused.update({i: TenantLimitReached(t) for i, t in by_tenant.items()})
        return refused


def _counted(new: NewInvocation) -> tuple[str, str]:
    """Whose open counts the invocation is in: its owner's and its tenant's."""
    return new.owner, new.tenant_or_owner


def _refused_keys(opened: Sequence[NewInvocation], refused: Mapping[str, Refused]) -> set[Key]:
    """The counts that refused rows: each refused row's owner's or tenant's."""
    return {
        (OWNER, new.owner)
        if isinstance(refused[new.id], OwnerLimitReached)
        else (TENANT, new.tenant_or_owner)
        for new in opened
        if new.id in refused
    }


def _beyond(
    opened: Sequence[NewInvocation],
    counts: Mapping[Key, int],
    scope: str,
    key: Callable[[NewInvocation], str],
    caps: Mapping[str, int],
    cap: int,
    already: Mapping[str, object],
) -> dict[str, str]:
    """Ids of ``opened`` rows beyond their key's cap (``caps``, else ``cap``) of open
    invocations, counted in ``scope`` with them, with their key; rows ``already`` refused
    are not counted."""
    over: dict[str, str] = {}
    for name in sorted({key(new) for new in opened}):
        mine = [new.id for new in opened if key(new) == name]
        gone = sum(1 for i in mine if i in already)
        excess = counts[scope, name] - gone - caps.get(name, cap)
        if excess > 0:
            over.update({i: name for i in [i for i in mine if i not in already][-excess:]})
    return over


_BY_ID = sa.select(*INVOCATION_COLUMNS).where(
    inv.id == sa.bindparam("invocation_id", type_=sa.Text)
)
"""One invocation by id, built once: every status read runs it (building it was ~5% of the
embedded gateway's CPU under a burst of status reads)."""


WANTED_IDS = BoundBatch("wanted_ids", (sa.column("id", sa.Text),))


@cache
def _by_ids(carriage: Carriage) -> sa.Select[Any]:
    """Invocations by id, the ids a bound batch (:class:`.bound.BoundBatch`): one text for any
    number of them, where an expanding ``IN`` was rendered anew on every execution (about 7 %
    of a read of five), and no padding."""
    return sa.select(*INVOCATION_COLUMNS).where(
        inv.id.in_(sa.select(WANTED_IDS.cte(carriage).c.id))
    )


async def _get(conn: Connection, invocation_id: str) -> Invocation | None:
    result = await conn.execute(_BY_ID, {"invocation_id": invocation_id})
    row = result.mappings().first()
    return Invocation.from_row(row) if row is not None else None


NEW_ROW_COLUMNS = (
    "id",
    "owner",
    "session_id",
    "input",
    "request_hash",
    "status",
    "attempt",
    "cancel_requested",
    "last_event_id",
    "user_auth",
    "tenant",
    "priority",
)
"""The columns :func:`_row` fills (the others have defaults, or are stamped with the clock)."""
NEW_ROWS = BoundBatch(
    "new_rows", tuple(sa.column(name, inv[name].type) for name in NEW_ROW_COLUMNS)
)


def _row(new: NewInvocation) -> tuple[object, ...]:
    """A new invocation's values of :data:`NEW_ROW_COLUMNS`, in that order."""
    return (
        new.id,
        new.owner,
        new.session_id,
        new.input,
        new.request_hash,
        Status.QUEUED.value,
        0,  # attempt
        False,  # cancel_requested
        0,  # last_event_id
        new.user_auth,
        new.tenant_or_owner,
        new.priority,
    )


@cache
def _insert_statement(dialect: Dialect) -> sa.Insert:
    """A batch of new invocations inserted in the order given (their ``seq``), an id already
    taken skipped; one text for every batch size (:class:`.bound.BoundBatch`)."""
    rows = NEW_ROWS.cte(dialect.carriage, positions=True)
    values = [rows.c[name] for name in NEW_ROW_COLUMNS]
    source = (
        sa.select(*values, dialect.now, dialect.now)
        .where(sa.true())  # SQLite parses an upsert from a SELECT only with a WHERE
        .order_by(rows.c.position)
    )
    columns = [*NEW_ROW_COLUMNS, "created_at", "enqueued_at"]
    insert: sa.Insert = dialect.insert_new(invocations, "id").from_select(columns, source)
    return insert.returning(inv.id, inv.seq, inv.created_at)  # the rest is the request's own


def _queued(new: NewInvocation, seq: int, created_at: float) -> Invocation:
    """A just-inserted invocation, as a read of its row would return it."""
    return Invocation(
        id=new.id,
        seq=seq,
        owner=new.owner,
        session_id=new.session_id,
        request_hash=new.request_hash,
        status=Status.QUEUED,
        attempt=0,
        cancel_requested=False,
        output=None,
        error_code=None,
        error_message=None,
        last_event_id=0,
        created_at=created_at,
        started_at=None,
        finished_at=None,
        tenant=new.tenant_or_owner,
        priority=new.priority,
    )
