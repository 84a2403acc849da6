"""Table definitions the queries are written against, and the rows they return.

The DDL itself lives in ``migrations/``; ``tests/store/test_migrations.py`` proves the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from tether.status import CRASH, OPEN, RESUME, TERMINAL, TERMINAL_VALUES, Status
from tether.usage import UsageTotals

__all__ = ["CRASH", "OPEN", "RESUME", "TERMINAL", "TERMINAL_VALUES", "Status"]  # re-exported

metadata = sa.MetaData()
Json = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
"""A JSON column where None means no value (SQL NULL): output, checkpoint."""
JsonValue = sa.JSON(none_as_null=False).with_variant(JSONB(none_as_null=False), "postgresql")
"""A JSON column that always holds a value; None is JSON ``null``, which the contract allows
(``{"input": null}``)."""


invocations = sa.Table(
    "tether_invocations",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("session_id", sa.Text),
    sa.Column("input", JsonValue, nullable=False),
    sa.Column("request_hash", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("cancel_requested", sa.Boolean, nullable=False),
    sa.Column("output", Json),
    sa.Column("error_code", sa.Text),
    sa.Column("error_message", sa.Text),
    sa.Column("checkpoint", Json),
    sa.Column("last_event_id", sa.BigInteger, nullable=False),
    sa.Column("worker", sa.Text),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("enqueued_at", sa.Float, nullable=False),
    sa.Column("started_at", sa.Float),
    sa.Column("heartbeat_at", sa.Float),
    sa.Column("finished_at", sa.Float),
    sa.Column("resumed_by", sa.Text),
    sa.Column("crashes", sa.Integer, nullable=False),
    sa.Column("user_auth", sa.Boolean, nullable=False),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("priority", sa.SmallInteger, nullable=False),
    sa.Column("usage_input_tokens", sa.BigInteger, nullable=False),
    sa.Column("usage_output_tokens", sa.BigInteger, nullable=False),
    sa.Column("usage_cost", sa.Float, nullable=False),
    sa.Column("usage_estimated", sa.Boolean, nullable=False),
    sa.Column("usage_model_calls", sa.Integer, nullable=False),
)

events = sa.Table(
    "tether_events",
    metadata,
    sa.Column("invocation_id", sa.Text, primary_key=True),
    sa.Column("cursor", sa.BigInteger, primary_key=True),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("data", JsonValue, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)


threads = sa.Table(
    "tether_threads",
    metadata,
    sa.Column("owner", sa.Text, primary_key=True),
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

thread_messages = sa.Table(
    "tether_thread_messages",
    metadata,
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("invocation_id", sa.Text, nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

forgotten_turns = sa.Table(
    "tether_forgotten_turns",
    metadata,
    sa.Column("invocation_id", sa.Text, primary_key=True),
)
"""Invocations open in a session when its thread was deleted: they write to it no more."""

steps = sa.Table(
    "tether_steps",
    metadata,
    sa.Column("invocation_id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("result", JsonValue),
    sa.Column("error_type", sa.Text),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

waits = sa.Table(
    "tether_waits",
    metadata,
    sa.Column("invocation_id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("details", Json, nullable=False),
    sa.Column("wake_at", sa.Float),
    sa.Column("value", JsonValue),
    sa.Column("resolution", sa.Text),
    sa.Column("resolved_at", sa.Float),
    sa.Column("created_at", sa.Float, nullable=False),
)


workers = sa.Table(
    "tether_workers",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("lock_id", sa.Integer),
    sa.Column("backend_pid", sa.Integer),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("beat_at", sa.Float, nullable=False),
    sa.Column("ended_at", sa.Float),
)
"""Worker processes and their liveness locks (:mod:`tether.store.liveness`)."""

tenants = sa.Table(
    "tether_tenants",
    metadata,
    sa.Column("tenant", sa.Text, primary_key=True),
    sa.Column("weight", sa.Float, nullable=False),
    sa.Column("max_active", sa.Integer),
    sa.Column("max_queued", sa.Integer),
    sa.Column("rate", sa.Float),
    sa.Column("burst", sa.Integer),
    sa.Column("tokens_per_invocation", sa.BigInteger),
    sa.Column("tokens_per_period", sa.BigInteger),
    sa.Column("cost_per_period", sa.Float),
    sa.Column("budget_period", sa.Float, nullable=False),
    sa.Column("on_budget", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)
"""Each tenant's limits; the row ``*`` holds the defaults (:mod:`tether.store.tenants`)."""

global_limits = sa.Table(
    "tether_global_limits",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("max_active", sa.Integer),
    sa.Column("updated_at", sa.Float, nullable=False),
)
"""The deployment-wide limits: one row, ``id = 1``."""

tenant_buckets = sa.Table(
    "tether_tenant_buckets",
    metadata,
    sa.Column("tenant", sa.Text, primary_key=True),
    sa.Column("tokens", sa.Float, nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("granted", sa.Integer, nullable=False),
)
"""Each rate-limited tenant's accept token bucket (:mod:`tether.store.buckets`)."""

tenant_usage = sa.Table(
    "tether_tenant_usage",
    metadata,
    sa.Column("tenant", sa.Text, primary_key=True),
    sa.Column("period_start", sa.Float, primary_key=True),
    sa.Column("tokens", sa.BigInteger, nullable=False),
    sa.Column("cost", sa.Float, nullable=False),
    sa.Column("model_calls", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)
"""What each tenant's model calls used per budget period (:mod:`tether.store.usage`)."""

open_counts = sa.Table(
    "tether_open_counts",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("open_count", sa.BigInteger, nullable=False),
)
"""Open invocations per owner and per tenant, kept by every accept and ending
(:mod:`tether.store.opencounts`)."""

USAGE_COLUMNS = [
    invocations.c[name]
    for name in (
        "usage_input_tokens",
        "usage_output_tokens",
        "usage_cost",
        "usage_estimated",
        "usage_model_calls",
    )
]


def status_is(column: sa.ColumnElement[str], *statuses: Status | str) -> sa.ColumnElement[bool]:
    """``column`` (an invocation's status) is one of ``statuses``, written into the statement's
    text rather than bound. The partial indexes name the statuses they hold, and SQLite
    prepares a statement again on every execution when a bound value decides whether such an
    index applies: a claim's 32 head probes took 0.8 ms bound against 0.07 ms written in."""
    values = [Status(s).value for s in statuses]
    if len(values) == 1:
        return column == sa.literal_column(f"'{values[0]}'")
    return column.in_([sa.literal_column(f"'{v}'") for v in values])


def usage_of(row: sa.RowMapping) -> UsageTotals | None:
    """An invocation row's model usage; None when it made no model call."""
    calls = int(row["usage_model_calls"])
    if not calls:
        return None
    return UsageTotals(
        int(row["usage_input_tokens"]),
        int(row["usage_output_tokens"]),
        float(row["usage_cost"]),
        bool(row["usage_estimated"]),
        calls,
    )


tenant_passes = sa.Table(
    "tether_tenant_passes",
    metadata,
    sa.Column("tenant", sa.Text, primary_key=True),
    sa.Column("pass", sa.Float, nullable=False),
)
"""Each tenant's stride pass, advanced by the claim (:mod:`tether.store.claims`)."""

claim_clock = sa.Table(
    "tether_claim_clock",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("vtime", sa.Float, nullable=False),
)
"""The fair claim's virtual time: one row, ``id = 1``, written by the first claim."""


@dataclass(frozen=True, slots=True)
class Invocation:
    """One invocation row as the API sees it: everything but its input, which no answer shows
    and only the attempt that runs it reads (:class:`Claim`). A status read of a run whose
    input is large (a long conversation) costs what any other costs: nothing fetches, ships
    or decodes the input."""

    id: str
    seq: int
    owner: str
    session_id: str | None
    request_hash: str
    status: Status
    attempt: int
    cancel_requested: bool
    output: Any
    error_code: str | None
    error_message: str | None
    last_event_id: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    tenant: str = ""
    priority: int = 0
    usage: UsageTotals | None = None
    """What its model calls used (``ctx.record_model_usage``); None when it made none."""

    @classmethod
    def from_row(cls, row: sa.RowMapping) -> Invocation:
        return cls(
            id=row["id"],
            seq=row["seq"],
            owner=row["owner"],
            session_id=row["session_id"],
            request_hash=row["request_hash"],
            status=Status(row["status"]),
            attempt=row["attempt"],
            cancel_requested=bool(row["cancel_requested"]),
            output=row["output"],
            error_code=row["error_code"],
            error_message=row["error_message"],
            last_event_id=row["last_event_id"],
            created_at=row["created_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            tenant=row["tenant"],
            priority=row["priority"],
            usage=usage_of(row),
        )


INVOCATION_COLUMNS = [
    *(invocations.c[name] for name in Invocation.__slots__ if name != "usage"),
    *USAGE_COLUMNS,
]


@dataclass(frozen=True, slots=True)
class Claim:
    """What a worker gets when it wins an invocation: enough to run the attempt."""

    invocation_id: str
    attempt: int
    input: Any
    session_id: str | None
    checkpoint: Any
    started_cursor: int
    resumed_by: str | None = None
    """Why this attempt runs: None (the first), ``crash`` or ``resume`` (a wait resolved)."""
    owner: str = ""
    user_auth: bool = False
    """The first attempt was handed the caller's access token (kept in that process only)."""
    tenant: str = ""
    """Whose caps and budgets the attempt counts against."""

    @property
    def is_recovery(self) -> bool:
        return self.resumed_by == CRASH


HANDED_BACK = -1.0
"""The ``heartbeat_at`` of an attempt a stopping worker handed back (SIGTERM, a deploy, its
``shutdown_grace`` over): stale at once, like a dead worker's (``0``), but its replacement is
not counted as a crash (no backoff, not towards ``limits.max_attempts``)."""


@dataclass(frozen=True, slots=True)
class StaleAttempt:
    invocation_id: str
    attempt: int
    cancel_requested: bool
    crashes: int = 0
    """Attempts of this invocation lost to crashes before this one."""
    handed_back: bool = False
    """Its worker was stopping and handed it back (:data:`HANDED_BACK`): not a crash."""


@dataclass(frozen=True, slots=True)
class NewInvocation:
    id: str
    owner: str
    session_id: str | None
    input: Any
    request_hash: str
    user_auth: bool = False
    """The accepting process holds the caller's access token for it (in memory only)."""
    tenant: str | None = None
    """Whose share, caps and budgets it counts against; None: its owner's."""
    priority: int = 0
    """Higher is claimed first among its tenant's queued invocations."""
    input_text: str | None = None
    """``input``'s canonical JSON, as the request hash covered it
    (:func:`tether.jsonvalue.request_hash`): the row stores it instead of encoding the input
    again. None: the store encodes ``input``."""

    @property
    def tenant_or_owner(self) -> str:
        return self.owner if self.tenant is None else self.tenant
