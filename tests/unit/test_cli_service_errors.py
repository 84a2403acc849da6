"""What ``tether`` says when a service is down or unprepared: which, where, never a password."""

from __future__ import annotations

import psycopg
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.exc import OperationalError, ProgrammingError

from tether.cli.service_errors import service_error_message
from tether.service_urls import without_password
from tether.settings import Settings
from tether.store.errors import LockNotGranted, SchemaMissing, StoreUnavailable, store_error

SETTINGS = Settings(
    database_url="postgresql+psycopg://app:s3cret@db.internal:5432/tether",
    redis_url="redis://:s3cret@cache.internal:6379/0",
)


class UndefinedTable(Exception):
    sqlstate = "42P01"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@h:6379/0", "redis://***@h:6379/0"),
        ("redis://:Super/s3cret@h:6390/0", "redis://***@h:6390/0"),
        ("postgresql+psycopg://app:Super@s3cret@h:5432/db", "postgresql+psycopg://***@h:5432/db"),
        ("postgresql://app:a?b#c@h/db", "postgresql://***@h/db"),
        (
            "postgresql://h/db?sslmode=require&password=s3cret",
            "postgresql://h/db?sslmode=require&password=***",
        ),
        ("postgresql://h/db?password=s3cr@et", "postgresql://h/db?password=***"),  # '@' inside
        ("redis://h/0?Password=a@b&db=1", "redis://h/0?Password=***&db=1"),
        ("unix:///run/redis.sock?db=1", "unix:///run/redis.sock?db=1"),
        ("not a url s3cret", "<unparsable URL>"),
    ],
)
def test_a_url_is_shown_without_anything_before_its_last_at_or_a_password_parameter(
    url: str, shown: str
) -> None:
    assert without_password(url) == shown


def test_an_unreachable_database_is_named_without_its_password() -> None:
    error = store_error(
        OperationalError("SELECT 1", {}, psycopg.OperationalError("refused s3cret"))
    )
    assert isinstance(error, StoreUnavailable)
    message = service_error_message(error, SETTINGS)
    assert message is not None
    assert "postgresql+psycopg://***@db.internal:5432/tether (OperationalError)" in message
    assert "s3cret" not in message


def test_an_unreachable_redis_is_named_without_its_password() -> None:
    message = service_error_message(RedisConnectionError("s3cret"), SETTINGS)
    assert message is not None
    assert "redis://***@cache.internal:6379/0" in message
    assert "s3cret" not in message


def test_with_a_pubsub_redis_of_its_own_both_are_named_without_their_passwords() -> None:
    both = SETTINGS.model_copy(update={"pubsub_redis_url": "redis://:t0ken@events.internal:6380/0"})
    message = service_error_message(RedisConnectionError("s3cret t0ken"), both)
    assert message is not None
    assert "redis://***@cache.internal:6379/0 (broker)" in message
    assert "redis://***@events.internal:6380/0 (pub/sub)" in message
    assert "TETHER_PUBSUB_REDIS_URL" in message
    assert "s3cret" not in message and "t0ken" not in message


def test_pubsub_goes_through_redis_url_unless_a_pubsub_redis_is_set() -> None:
    assert SETTINGS.pubsub_redis == SETTINGS.redis_url
    assert Settings(pubsub_redis_url="").pubsub_redis == Settings().redis_url
    own = Settings(pubsub_redis_url="redis://events:6380/1")
    assert (own.pubsub_redis, own.redis_url) == ("redis://events:6380/1", Settings().redis_url)


def test_a_missing_table_says_to_migrate_and_other_sql_errors_are_not_explained_away() -> None:
    missing = store_error(ProgrammingError("SELECT", {}, UndefinedTable()))
    assert isinstance(missing, SchemaMissing)
    assert "run `tether migrate` first" in (service_error_message(missing, SETTINGS) or "")
    other = store_error(ProgrammingError("SELECT", {}, Exception()))
    assert other is not None and service_error_message(other, SETTINGS) is None


class LockNotAvailable(Exception):
    sqlstate = "55P03"


def test_a_lock_not_granted_in_time_says_to_run_the_command_again() -> None:
    error = store_error(OperationalError("ALTER", {}, LockNotAvailable("s3cret")))
    assert isinstance(error, LockNotGranted) and isinstance(error, StoreUnavailable)
    message = service_error_message(error, SETTINGS)
    assert message is not None and "s3cret" not in message
    assert message.startswith(
        "PostgreSQL at postgresql+psycopg://***@db.internal:5432/tether did not grant a lock "
        "within lock_timeout"
    )
    assert "run the command again" in message
