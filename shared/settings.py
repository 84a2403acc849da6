"""One typed settings object, read once at start from a YAML file and ``TETHER_*`` variables.

Nested settings use ``__`` in variable names (``TETHER_TIMERS__STALE_AFTER=5``). Precedence,
highest first: explicit overrides (command-line flags), environment, YAML file, defaults.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple, TypeGuard

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.agent_settings import AgentSettings
from tether.auth_settings import MIN_TOKEN_CHARS, AuthSettings
from tether.service_urls import checked_database_url, checked_redis_url
from tether.settings_env import ENV_DELIMITER, ENV_PREFIX, UnknownVariable, environment_values
from tether.settings_file import CONFIG_ENV, SettingsFileError, read_settings_file
from tether.settings_section import SETTINGS_RULES, SettingsSection, no_booleans_for_numbers
from tether.timer_settings import Timers

__all__ = [
    "MIN_TOKEN_CHARS",
    "AgentSettings",
    "AuthSettings",
    "Settings",
    "SettingsFileError",
    "Timers",
    "UnknownVariable",
    "load_settings",
    "reference",
]

STREAM_BUFFER_BYTES = 256 * 1024
"""Default of ``limits.stream_buffer_bytes``; also what a pub/sub built without settings uses."""
REPLAY_CACHE_BYTES = 32 * 1024 * 1024
"""Default of ``limits.replay_cache_bytes``."""


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
            "Attempts an invocation may have, counting those lost to crashes (not parks, not "
            "a stopping worker's hand-backs); when the last one dies too, it fails with "
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
    queue: str = Field(
        "tether",
        description=(
            "Dramatiq queue name. It does not keep apps apart: a worker claims whatever its "
            "database holds, so give each app a database of its own."
        ),
    )
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

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        return no_booleans_for_numbers(cls, data)

    @field_validator("log_level")
    @classmethod
    def logging_level(cls, level: str) -> str:
        """One of logging's level names, in any case: refused here, not by each process as it
        sets its level (a worker process would fail at boot)."""
        name = level.strip().upper()
        if name not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return name

    @field_validator("embedded_path")
    @classmethod
    def sqlite_file(cls, path: str) -> str:
        if not path.strip():
            raise ValueError("must name an SQLite file, or :memory: for a throwaway store")
        return path

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


class SettingRow(NamedTuple):
    """One row of the settings table in docs/configuration.md."""

    variable: str
    default: str
    allowed: str
    """The bounds of a number (``> 0, ≤ 508``); empty for other settings."""
    meaning: str


def reference() -> list[SettingRow]:
    """Every setting, for the docs."""
    rows: list[SettingRow] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if _is_section(annotation):
                walk(annotation, f"{prefix}{name.upper()}{ENV_DELIMITER}")
                continue
            default = repr(field.get_default(call_default_factory=True))
            variable = f"{prefix}{name.upper()}"
            rows.append(SettingRow(variable, default, _bounds(field), field.description or ""))

    walk(Settings, ENV_PREFIX)
    return rows


BOUND_SIGNS = (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"))


def _bounds(field: FieldInfo) -> str:
    """A number's bounds, from the constraints pydantic keeps (``annotated_types.Gt(gt=0)``)."""
    found = []
    for rule in field.metadata:
        for attribute, sign in BOUND_SIGNS:
            bound = getattr(rule, attribute, None)
            if bound is not None:
                found.append(f"{sign} {int(bound) if float(bound).is_integer() else bound}")
    return ", ".join(found)


if __name__ == "__main__":
    print("| variable | default | range | meaning |\n| --- | --- | --- | --- |")
    for row in reference():
        print(f"| `{row.variable}` | `{row.default}` | {row.allowed} | {row.meaning} |")
