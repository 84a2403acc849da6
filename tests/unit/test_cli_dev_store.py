"""What ``tether dev`` and ``tether tenants --db`` say when their SQLite file cannot be used: one
line naming the file and why, exit status 1 (2 for a setting that names no file), never a
traceback, never PostgreSQL."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.harness import Launch
from tether.cli.service_errors import sqlite_error_message, unusable_sqlite_file
from tether.store.errors import StoreError


def tether(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    launch = Launch()
    return subprocess.run(
        [*launch.command, *args],
        cwd=launch.cwd,
        env=launch.env(env or {}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def not_a_database(folder: Path) -> Path:
    path = folder / "notes.db"
    path.write_text("these are notes, not an SQLite database\n" * 10)
    return path


def says(command: str, path: Path, why: str) -> str:
    return (
        f"tether {command}: cannot use the SQLite file {path} ({why}): choose another with --db\n"
    )


@pytest.mark.parametrize(
    ("place", "why"),
    [
        ("in a missing folder", "its folder does not exist"),
        ("a folder", "it is a folder"),
        ("not a database", "it is not an SQLite database"),
    ],
)
def test_dev_names_a_file_that_cannot_be_an_sqlite_database_and_why(
    tmp_path: Path, place: str, why: str
) -> None:
    path = {
        "in a missing folder": tmp_path / "missing" / "x.db",
        "a folder": tmp_path,
        "not a database": not_a_database(tmp_path),
    }[place]
    done = tether("dev", "--port", "0", "--db", str(path))
    assert (done.returncode, done.stderr) == (1, says("dev", path, why))


@pytest.mark.parametrize("place", ["a folder", "not a database", "no folder"])
def test_tenants_names_a_file_that_cannot_be_used_and_why(tmp_path: Path, place: str) -> None:
    path, why = {
        "a folder": (tmp_path, "it is a folder"),
        "not a database": (not_a_database(tmp_path), "it is not an SQLite database"),
        "no folder": (tmp_path / "none" / "t.db", "its folder does not exist"),
    }[place]
    done = tether("tenants", "list", "--db", str(path))
    assert (done.returncode, done.stderr) == (1, says("tenants", path, why))


@pytest.mark.parametrize(("args", "env"), [(["--db", ""], {}), ([], {"TETHER_EMBEDDED_PATH": ""})])
def test_an_empty_sqlite_path_is_a_bad_setting(args: list[str], env: dict[str, str]) -> None:
    done = tether("dev", "--port", "0", *args, env=env)
    assert done.returncode == 2
    assert done.stderr == (
        "tether: settings: embedded_path: must name an SQLite file, or :memory: for a "
        "throwaway store\n"
    )


def test_a_file_that_fails_once_opened_is_named_with_the_drivers_error_class(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "dev.db")
    assert unusable_sqlite_file(path) is None and unusable_sqlite_file(":memory:") is None
    error = StoreError("OperationalError: disk I/O error at /secret/detail")
    message = sqlite_error_message(error, path)
    assert (
        message == f"cannot use the SQLite file {path} (OperationalError): choose another with --db"
    )


@pytest.mark.parametrize(
    ("existing", "why"),
    [(False, "its folder is read-only"), (True, "it or its folder is read-only")],
)
def test_a_read_only_place_is_named_as_such_before_the_file_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existing: bool, why: str
) -> None:
    """A read-only file system (or folder) was "(OperationalError)" once opening failed, with at
    times a traceback from the driver's thread after the loop had closed. The access check is
    faked: the tests may run as root, whom permissions do not stop."""
    path = tmp_path / "t.db"
    if existing:
        path.write_bytes(b"")
    monkeypatch.setattr("os.access", lambda *args, **kwargs: False)
    assert unusable_sqlite_file(str(path)) == (
        f"cannot use the SQLite file {path} ({why}): choose another with --db"
    )
