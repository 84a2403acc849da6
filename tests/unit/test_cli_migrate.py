"""``tether migrate`` bounded by ``lock_timeout`` (docs/operations.md): when a lock is not granted
in time it fails in one line, exit status 1, and can simply be run again."""

from __future__ import annotations

import subprocess

import psycopg

from tests.harness import Launch
from tether.store.dialect import MIGRATION_LOCK_KEY


def migrate(url: str, **env: str) -> subprocess.CompletedProcess[str]:
    launch = Launch()
    return subprocess.run(
        [*launch.command, "migrate"],
        cwd=launch.cwd,
        env=launch.env({"TETHER_DATABASE_URL": url, **env}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_migration_that_waits_past_lock_timeout_fails_in_one_line_and_runs_again(
    fresh_database: str,
) -> None:
    dsn = fresh_database.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as holder:  # another `tether migrate`, say
        holder.execute(f"SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})")
        done = migrate(fresh_database, PGOPTIONS="-c lock_timeout=200ms")
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("tether migrate: PostgreSQL at postgresql+psycopg://")
    assert "did not grant a lock within lock_timeout" in line and "run the command again" in line
    again = migrate(fresh_database, PGOPTIONS="-c lock_timeout=200ms")
    assert again.returncode == 0, again.stderr
