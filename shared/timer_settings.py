"""The ``timers`` settings: every durability timer, in seconds, each finite and bounded.

Part of the one settings object (:mod:`tether.settings`, which re-exports it), kept apart as the
``auth`` and ``agents`` sections are. The bounds are generous: they keep a value from breaking
what is computed from it (a keepalive the kernel refuses, a timeout that overflows), not from
being unusual. ``stale_after``'s comes from the liveness connection's keepalive arithmetic
(:mod:`tether.liveness_keepalive`), and the timers that must fit within it follow.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from tether.liveness_keepalive import MAX_STALE_AFTER
from tether.settings_section import DAY, HOUR, SettingsSection

MAX_PERIOD = HOUR
"""How often something runs, or how long one wait lasts: at most an hour."""
MAX_RETENTION = 36500 * DAY  # 100 years: "keep for good" without a special value
MAX_RUN_DURATION = 30 * DAY


class Timers(SettingsSection):
    """Every durability timer, in seconds."""

    heartbeat_interval: float = Field(
        2.0, gt=0, le=MAX_STALE_AFTER / 2, description="How often a worker heartbeats."
    )
    stale_after: float = Field(
        10.0,
        gt=0,
        le=MAX_STALE_AFTER,
        description=(
            "An attempt with an older heartbeat is dead; so is a worker in tether_workers with "
            "an older liveness beat whose session lock nobody holds."
        ),
    )
    reaper_interval: float = Field(
        2.0, gt=0, le=MAX_PERIOD, description="How often each worker runs a reap pass."
    )
    requeue_after: float = Field(
        30.0,
        gt=0,
        le=DAY,
        description="Re-enqueue a queued invocation nobody claimed for this long.",
    )
    liveness_interval: float = Field(
        0.5,
        gt=0,
        le=MAX_STALE_AFTER / 2,
        description=(
            "How often each worker process beats its row in tether_workers and checks its "
            "liveness connection, and (with more than 4 workers holding their lock, less often) "
            "looks for workers whose session ended."
        ),
    )
    liveness_grace: float = Field(
        1.0,
        gt=0,
        le=MAX_STALE_AFTER,
        description=(
            "A worker whose session lock is gone is dead once its last liveness beat is this old "
            "(at least twice liveness_interval, at most stale_after)."
        ),
    )
    broker_check: float = Field(
        1.0,
        ge=0,
        le=MAX_PERIOD,
        description=(
            "How often each worker checks that Redis still holds the queue's messages (a marker "
            "key and the server's run_id) and re-sends what a flush, restart or fail-over lost "
            "(0: never; lost messages wait for requeue_after)."
        ),
    )
    recovery_backoff: float = Field(
        1.0,
        ge=0,
        le=MAX_PERIOD,
        description="Base delay between successive replacements of one invocation.",
    )
    recovery_backoff_max: float = Field(60.0, ge=0, le=DAY, description="Cap on that delay.")
    retention: float = Field(
        7 * DAY, gt=0, le=MAX_RETENTION, description="Delete terminal invocations older than this."
    )
    count_audit: float = Field(
        300.0,
        ge=0,
        le=DAY,
        description=(
            "How often each worker's reaper compares the kept open counts (owner cap, "
            "max_queued) with the open rows and corrects any that drifted (0: never)."
        ),
    )
    statistics_check: float = Field(
        2.0,
        ge=0,
        le=MAX_PERIOD,
        description=(
            "How often each worker's reaper compares how many queued, active and waiting "
            "invocations PostgreSQL's planner believes there are with the rows, and runs "
            "ANALYZE on the invocations when one is far too low (0: never)."
        ),
    )
    shutdown_grace: float = Field(
        30.0, ge=0, le=DAY, description="How long a stopping worker lets running attempts finish."
    )
    sync_timeout: float = Field(
        30.0, gt=0, le=MAX_PERIOD, description="A sync POST answers 202 after waiting this long."
    )
    ping_interval: float = Field(15.0, gt=0, le=15.0, description="SSE keep-alive comment period.")
    inline_sleep_max: float = Field(
        5.0,
        ge=0,
        le=MAX_PERIOD,
        description="ctx.sleep up to this long sleeps in the process; longer ones park the run.",
    )
    claim_poll: float = Field(
        1.0,
        gt=0,
        le=MAX_PERIOD,
        description=(
            "How often each worker claims queued work for its free slots without a message "
            "(work that waited for a cap or its session's turn while the messages were dropped)."
        ),
    )
    timer_poll: float = Field(
        0.25,
        gt=0,
        le=MAX_PERIOD,
        description="How often each worker resumes parked runs whose sleep or wait timeout is due.",
    )
    stream_send_timeout: float = Field(
        30.0,
        gt=0,
        le=MAX_PERIOD,
        description=(
            "An SSE reader that cannot take one send buffer within this is too far behind: its "
            "stream is closed, and it reconnects with after=N."
        ),
    )
    body_read_timeout: float = Field(
        30.0,
        gt=0,
        le=MAX_PERIOD,
        description="A request body must arrive whole within this, else 408.",
    )
    store_deadline: float = Field(
        10.0,
        ge=0,
        le=MAX_PERIOD,
        description=(
            "Longest one use of a PostgreSQL connection (a transaction or a read, the wait for "
            "the connection included) may take: a server that stops answering without refusing "
            "(frozen, a half-open connection) then costs a 503 or a retry, not a request that "
            "waits as long as the operating system keeps the connection (0: no deadline)."
        ),
    )
    max_run_duration: float = Field(
        0.0,
        ge=0,
        le=MAX_RUN_DURATION,
        description=(
            "Longest an attempt's handler may run; the worker then cancels it and the "
            "invocation fails with limit_exceeded (0: no limit)."
        ),
    )
    limit_grace: float = Field(
        5.0,
        gt=0,
        le=MAX_PERIOD,
        description=(
            "How long a handler may keep running after ctx.emit raised LimitExceeded before "
            "the worker cancels it."
        ),
    )

    @model_validator(mode="after")
    def stale_exceeds_heartbeat(self) -> Timers:
        if self.stale_after < 2 * self.heartbeat_interval:
            raise ValueError(
                "timers.stale_after must be at least twice timers.heartbeat_interval "
                f"(got stale_after={self.stale_after}, "
                f"heartbeat_interval={self.heartbeat_interval})"
            )
        if not 2 * self.liveness_interval <= self.liveness_grace <= self.stale_after:
            raise ValueError(
                "timers.liveness_grace must be at least twice timers.liveness_interval and at "
                f"most timers.stale_after (got liveness_grace={self.liveness_grace}, "
                f"liveness_interval={self.liveness_interval}, stale_after={self.stale_after})"
            )
        return self
