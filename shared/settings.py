"""One typed settings object, read once at start from a YAML file and ``TETHER_*`` variables.

Nested settings use ``__`` in variable names (``TETHER_TIMERS__STALE_AFTER=5``). Precedence,
highest first: explicit overrides (command-line flags), environment, YAML file, defaults.
"""

from __future__ import annotations

import os
from typing import Any, TypeGuard

from pydantic import (
    BaseModel,
    Field,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.agent_settings import AgentSettings
from tether.auth_settings import MIN_TOKEN_CHARS, AuthSettings
from tether.service_urls import checked_database_url, checked_redis_url
from tether.settings_env import ENV_DELIMITER, ENV_PREFIX, UnknownVariable, environment_values
from tether.settings_file import CONFIG_ENV, SettingsFileError, read_settings_file
from tether.settings_section import SETTINGS_RULES, SettingsSection

__all__ = [
    "MIN_TOKEN_CHARS",
    "AgentSettings",
    "AuthSettings",
    "Settings",
    "SettingsFileError",
    "UnknownVariable",
    "load_settings",
    "reference",
]

STREAM_BUFFER_BYTES = 256 * 1024
"""Default of ``limits.stream_buffer_bytes``; also what a pub/sub built without settings uses."""
REPLAY_CACHE_BYTES = 32 * 1024 * 1024
"""Default of ``limits.replay_cache_bytes``."""


class Timers(SettingsSection):
    """Every durability timer, in seconds."""

    heartbeat_interval: float = Field(2.0, gt=0, description="How often a worker heartbeats.")
    stale_after: float = Field(
        10.0, gt=0, description="An attempt with an older heartbeat is dead."
    )
    reaper_interval: float = Field(2.0, gt=0, description="How often each worker runs a reap pass.")
    requeue_after: float = Field(
        30.0, gt=0, description="Re-enqueue a queued invocation nobody claimed for this long."
    )
    liveness_interval: float = Field(
        0.5,
        gt=0,
        description=(
            "How often each worker process beats its row in tether_workers and checks its "
            "liveness connection, and (with more than 4 workers, less often) looks for workers "
            "whose session ended."
        ),
    )
    liveness_grace: float = Field(
        1.0,
        gt=0,
        description=(
            "A worker whose session lock is gone is dead once its last liveness beat is this old "
            "(at least twice liveness_interval, at most stale_after)."
        ),
    )
    broker_check: float = Field(
        1.0,
        ge=0,
        description=(
            "How often each worker checks that Redis still holds the queue's messages (a marker "
            "key and the server's run_id) and re-sends what a flush, restart or fail-over lost "
            "(0: never; lost messages wait for requeue_after)."
        ),
    )
    recovery_backoff: float = Field(
        1.0, ge=0, description="Base delay between successive replacements of one invocation."
    )
    recovery_backoff_max: float = Field(60.0, ge=0, description="Cap on that delay.")
    retention: float = Field(
        7 * 24 * 3600.0, gt=0, description="Delete terminal invocations older than this."
    )
    count_audit: float = Field(
        300.0,
        ge=0,
        description=(
            "How often each worker's reaper compares the kept open counts (owner cap, "
            "max_queued) with the open rows and corrects any that drifted (0: never)."
        ),
    )
    statistics_check: float = Field(
        2.0,
        ge=0,
        description=(
            "How often each worker's reaper compares how many queued, active and waiting "
            "invocations PostgreSQL's planner believes there are with the rows, and runs "
            "ANALYZE on the invocations when one is far too low (0: never)."
        ),
    )
    shutdown_grace: float = Field(
        30.0, ge=0, description="How long a stopping worker lets running attempts finish."
    )
    sync_timeout: float = Field(
        30.0, gt=0, description="A sync POST answers 202 after waiting this long."
    )
    ping_interval: float = Field(15.0, gt=0, le=15.0, description="SSE keep-alive comment period.")
    inline_sleep_max: float = Field(
        5.0,
        ge=0,
        description="ctx.sleep up to this long sleeps in the process; longer ones park the run.",
    )
    claim_poll: float = Field(
        1.0,
        gt=0,
        description=(
            "How often each worker claims queued work for its free slots without a message "
            "(work that waited for a cap or its session's turn while the messages were dropped)."
        ),
    )
    timer_poll: float = Field(
        0.25,
        gt=0,
        description="How often each worker resumes parked runs whose sleep or wait timeout is due.",
    )
    stream_send_timeout: float = Field(
        30.0,
        gt=0,
        description=(
            "An SSE reader that cannot take one send buffer within this is too far behind: its "
            "stream is closed, and it reconnects with after=N."
        ),
    )
    body_read_timeout: float = Field(
        30.0, gt=0, description="A request body must arrive whole within this, else 408."
    )
    max_run_duration: float = Field(
        0.0,
        ge=0,
        description=(
            "Longest an attempt's handler may run; the worker then cancels it and the "
            "invocation fails with limit_exceeded (0: no limit)."
        ),
    )
    limit_grace: float = Field(
        5.0,
        gt=0,
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


class Limits(SettingsSection):
    max_body_bytes: int = Field(1024 * 1024, gt=0, description="Largest accepted request body.")
    max_event_bytes: int = Field(1024 * 1024, gt=0, description="Largest event a handler may emit.")
    stream_buffer_bytes: int = Field(
        STREAM_BUFFER_BYTES,
        ge=1024,
        description=(
            "Per-stream memory bound: pub/sub messages a subscriber has not taken yet (beyond it "
            "they are dropped for a re-read of the store), a replay page, a chunk written to a "
            "reader."
        ),
    )
    replay_cache_bytes: int = Field(
        REPLAY_CACHE_BYTES,
        ge=0,
        description=(
            "Per gateway process, estimated: events its streams read from the store, kept (with "
            "their SSE frames) so reconnects and other streams of the same invocation read only "
            "what is not kept (0: keep nothing)."
        ),
    )
    max_active_per_owner: int = Field(
        1000, ge=0, description="Non-terminal invocations one owner may have (0: no limit) → 429."
    )
    max_queued: int = Field(
        100_000, ge=0, description="Queued invocations the server admits (0: no limit) → 503."
    )
    max_attempts: int = Field(
        5,
        ge=0,
        description=(
            "Attempts an invocation may have; when the last one dies too, it fails with "
            "recovery_limit_exceeded (0: no limit, a poison run is replaced forever)."
        ),
    )
    retry_after: int = Field(1, ge=1, description="Retry-After seconds on 429 and 503.")
    max_events_per_run: int = Field(
        100_000,
        ge=0,
        description=(
            "Events one attempt may emit (0: no limit); past it ctx.emit raises LimitExceeded "
            "and the invocation fails with limit_exceeded."
        ),
    )
    max_event_bytes_per_run: int = Field(
        256 * 1024 * 1024,
        ge=0,
        description=(
            "Sum of the JSON bytes of the events one attempt may emit (0: no limit); "
            "past it as above."
        ),
    )


class WorkerSettings(SettingsSection):
    concurrency: int = Field(
        200, ge=1, description="Invocations one worker process runs at once (async handlers)."
    )
    reserve: int | None = Field(
        None,
        ge=0,
        description=(
            "Slots per worker process kept for tenants with nothing running (at most all but "
            "one): under another tenant's flood, a tenant's first invocation starts as soon as "
            "a gateway announces it instead of waiting for a slot to free. Unset: one slot in "
            "20 (`concurrency // 20`, so none below 20); 0: none kept."
        ),
    )

    @property
    def reserved_slots(self) -> int:
        """``reserve``, or its default for ``concurrency``."""
        return self.concurrency // 20 if self.reserve is None else self.reserve

    processes: int = Field(1, ge=1, description="Worker processes started by `tether worker`.")
    threads: int = Field(4, ge=1, description="Dramatiq threads per worker process.")
    poll_timeout_ms: int = Field(
        100, ge=1, description="Longest idle wait of a Dramatiq consumer between queue polls."
    )
    queue: str = Field("tether", description="Dramatiq queue name.")
    session_liveness: bool = Field(
        True,
        description=(
            "Notice a dead worker process through its PostgreSQL session (an advisory lock held "
            "on a connection of its own) within about a second; false: by heartbeats only, "
            "after stale_after."
        ),
    )
    liveness_url: str = Field(
        "",
        description=(
            "PostgreSQL URL of that connection when database_url goes through a pooler in "
            "transaction mode (PgBouncer), which breaks session locks; empty: database_url."
        ),
    )

    @field_validator("liveness_url")
    @classmethod
    def postgres_url(cls, url: str) -> str:
        return checked_database_url(url) if url else ""


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class Settings(BaseSettings):
    """Everything Tether reads at start. Every field has a documented default."""

    # Errors name the setting, never echo its value: tokens and database passwords live here.
    model_config = SettingsConfigDict(
        **SETTINGS_RULES, env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_DELIMITER
    )

    app: str = Field(
        "tether.examples.hello:app", description="The AgentApp to serve, as module:attribute."
    )
    database_url: str = Field(
        "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        description=(
            "PostgreSQL URL of the distributed mode: postgresql:// or postgresql+psycopg:// "
            "(psycopg either way), with '@', '/', '?' and '#' of a password percent-encoded."
        ),
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description=(
            "Redis for the broker (the queue of tokens), and for pub/sub unless "
            "pubsub_redis_url is set: redis://, rediss:// (TLS) or unix:// (a socket)."
        ),
    )
    pubsub_redis_url: str | None = Field(
        None,
        description=(
            "Redis for pub/sub: stored events on their way to open streams, new-work "
            "announcements, cancel requests. Unset: redis_url. A server of its own keeps the "
            "streams' traffic off the broker's single thread."
        ),
    )
    embedded_path: str = Field(
        "tether.db", description="SQLite file of `tether dev`; ':memory:' for a throwaway store."
    )
    host: str = Field("127.0.0.1", description="Address the gateway listens on.")
    port: int = Field(8000, ge=0, le=65535, description="Port the gateway listens on.")
    log_level: str = Field(
        "INFO",
        description=(
            "Python logging level of the gateway, `tether dev` and the worker processes: DEBUG, "
            "INFO, WARNING, ERROR or CRITICAL."
        ),
    )
    access_log: bool = Field(
        True,
        description=(
            "One line per HTTP request on the `aiohttp.access` logger at INFO (the gateway and "
            "`tether dev`); false where a proxy in front logs the requests already."
        ),
    )
    timers: Timers = Field(default_factory=Timers)
    limits: Limits = Field(default_factory=Limits)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    agents: AgentSettings = Field(default_factory=AgentSettings)

    @field_validator("log_level")
    @classmethod
    def logging_level(cls, level: str) -> str:
        """One of logging's level names, in any case: refused here, not by each process as it
        sets its level (a worker process would fail at boot)."""
        name = level.strip().upper()
        if name not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return name

    @field_validator("database_url")
    @classmethod
    def postgres_url(cls, url: str) -> str:
        """A PostgreSQL URL, with the psycopg driver named (``postgresql://`` is taken too)."""
        return checked_database_url(url)

    @field_validator("redis_url")
    @classmethod
    def broker_redis_url(cls, url: str) -> str:
        return checked_redis_url(url)

    @field_validator("pubsub_redis_url")
    @classmethod
    def pubsub_redis_url_or_none(cls, url: str | None) -> str | None:
        """A Redis URL, or None (unset or empty: ``redis_url``)."""
        return checked_redis_url(url) if url else None

    @property
    def pubsub_redis(self) -> str:
        """The Redis pub/sub goes through: ``pubsub_redis_url``, or ``redis_url`` when unset."""
        return self.pubsub_redis_url or self.redis_url


def load_settings(config_file: str | None = None, **overrides: Any) -> Settings:
    """Build the settings: defaults < YAML file < environment < explicit overrides, validated
    once, merged (a rule between two settings judges the values in force, wherever each came
    from)."""
    path = config_file or os.environ.get(CONFIG_ENV)
    from_file = read_settings_file(path) if path else {}
    from_env = environment_values(Settings, SECTIONS)
    merged = _deep_merge(from_file, from_env)
    merged = _deep_merge(merged, {k: v for k, v in overrides.items() if v is not None})
    return Settings.model_validate(merged)


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _is_section(annotation: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


SECTIONS = tuple(
    name for name, field in Settings.model_fields.items() if _is_section(field.annotation)
)


def reference() -> list[tuple[str, str, str]]:
    """(environment variable, default, description) for every setting, for the docs."""
    rows: list[tuple[str, str, str]] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if _is_section(annotation):
                walk(annotation, f"{prefix}{name.upper()}{ENV_DELIMITER}")
                continue
            default = field.get_default(call_default_factory=True)
            rows.append((f"{prefix}{name.upper()}", repr(default), field.description or ""))

    walk(Settings, ENV_PREFIX)
    return rows


if __name__ == "__main__":
    print("| variable | default | meaning |\n| --- | --- | --- |")
    for variable, default, meaning in reference():
        print(f"| `{variable}` | `{default}` | {meaning} |")
