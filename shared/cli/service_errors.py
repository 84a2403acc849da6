"""What a command says when PostgreSQL or Redis cannot be used: which service, where (its password
masked), and what to do about it. Never the driver's text, never a traceback."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tether.service_urls import without_password
from tether.settings import Settings
from tether.store.errors import SchemaMissing, StoreUnavailable

SERVICE_ERRORS = (StoreUnavailable, SchemaMissing, RedisConnectionError, RedisTimeoutError)


def service_error_message(error: BaseException, settings: Settings) -> str | None:
    """One line for a service error a command raised, or None when it is not about reaching or
    preparing a service (a bug, to be raised as is)."""
    database = without_password(settings.database_url)
    if isinstance(error, StoreUnavailable):
        cause = str(error).split(":", 1)[0]  # the driver's error class, never its text
        return (
            f"cannot use PostgreSQL at {database} ({cause}): start it, or point "
            "TETHER_DATABASE_URL (database_url in --config) at one"
        )
    if isinstance(error, SchemaMissing):
        return f"the database at {database} has no Tether tables: run `tether migrate` first"
    if isinstance(error, RedisConnectionError | RedisTimeoutError):
        if settings.pubsub_redis == settings.redis_url:
            where, names = without_password(settings.redis_url), "TETHER_REDIS_URL (redis_url"
        else:  # the driver's text would say which, and is never shown: name both
            where = (
                f"{without_password(settings.redis_url)} (broker) or "
                f"{without_password(settings.pubsub_redis)} (pub/sub)"
            )
            names = "TETHER_REDIS_URL or TETHER_PUBSUB_REDIS_URL (redis_url or pubsub_redis_url"
        return (
            f"cannot reach Redis at {where} ({type(error).__name__}): start it, or point "
            f"{names} in --config) at one"
        )
    return None
