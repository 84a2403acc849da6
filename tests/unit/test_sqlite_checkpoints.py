"""The embedded store's WAL checkpoints: never inside the loop's commits, on a thread of their
own after every so many commits, a failed one retried, and none left running after close."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from tether.store.schema import NewInvocation
from tether.store.sqlite_checkpoints import Checkpoints
from tether.store.store import Store

FILE = "tether.db"
"""The file of the unit tests' ``store`` fixture (tests/unit/conftest.py)."""


def rows_in_database_file(path: Path) -> int:
    """Invocations in the database file itself, ignoring the WAL: what checkpoints copied."""
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM tether_invocations").fetchone()[0])
    finally:
        conn.close()


def schema_checkpointed(path: Path) -> None:
    """The migrated schema copied into the database file (from another connection), so that
    the file alone can be counted from."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


def checkpoints_of(store: Store) -> Checkpoints:
    assert store.db.sync is not None
    return store.db.sync.checkpoints


async def accept(store: Store, count: int, input: object = None) -> None:
    for _ in range(count):  # one commit each
        await store.accept(NewInvocation(str(uuid.uuid4()), "ann", None, input or {}, "h"))


def wal_frames(path: Path) -> int:
    """The WAL file's size in frames (one page and its header each)."""
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size // (4096 + 24) if wal.exists() else 0


async def checkpointed(checkpoints: Checkpoints) -> None:
    running = checkpoints._running
    assert running is not None
    await asyncio.wrap_future(running)


async def test_the_writer_does_not_checkpoint_in_its_commits(store: Store, tmp_path: Path) -> None:
    async with store.db.transaction() as conn:
        assert await conn.scalar(sa.text("PRAGMA wal_autocheckpoint")) == 0
    checkpoints_of(store)._every = 10_000
    schema_checkpointed(tmp_path / FILE)
    await accept(store, 300)
    assert rows_in_database_file(tmp_path / FILE) == 0  # all 300 still only in the WAL


async def test_a_checkpoint_runs_on_its_own_thread_after_every_so_many_commits(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoints = checkpoints_of(store)
    checkpoints._every = 8
    threads: list[str] = []
    run = checkpoints._checkpoint

    def recorded() -> None:
        threads.append(threading.current_thread().name)
        run()

    monkeypatch.setattr(checkpoints, "_checkpoint", recorded)
    schema_checkpointed(tmp_path / FILE)
    await accept(store, 7)
    assert checkpoints._running is None and rows_in_database_file(tmp_path / FILE) == 0
    await accept(store, 1)
    await checkpointed(checkpoints)
    assert rows_in_database_file(tmp_path / FILE) == 8
    assert len(threads) == 1 and threads[0].startswith("tether-checkpoints")
    assert threading.current_thread().name not in threads


async def test_a_failed_checkpoint_is_logged_and_the_next_one_runs(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checkpoints = checkpoints_of(store)
    checkpoints._every = 4
    not_a_database = tmp_path / "not-a-database.db"
    not_a_database.write_bytes(b"this is not a SQLite database file" * 200)
    real_path, checkpoints._path = checkpoints._path, str(not_a_database)
    with caplog.at_level(logging.INFO, "tether.store.sqlite_checkpoints"):
        await accept(store, 4)
        await checkpointed(checkpoints)
    assert "checkpoint of the embedded store skipped (DatabaseError)" in caplog.text
    assert "not a database" not in caplog.text  # the class, not the error's text
    checkpoints._path = real_path
    await accept(store, 4)
    await checkpointed(checkpoints)
    assert rows_in_database_file(tmp_path / FILE) == 8


async def test_closing_the_store_waits_for_the_checkpoints_and_stops_their_thread(
    tmp_path: Path,
) -> None:
    path = tmp_path / "closing.db"
    store = Store.embedded(str(path))
    await store.migrate()
    checkpoints = checkpoints_of(store)
    checkpoints._every = 2
    await accept(store, 2)
    assert checkpoints._running is not None
    await store.close()
    assert checkpoints._running.done() and checkpoints._conn is None
    assert not any(t.name.startswith("tether-checkpoints") for t in threading.enumerate())
    checkpoints.committed()  # a late commit's call starts nothing
    assert rows_in_database_file(path) == 2


async def test_under_steady_commits_the_wal_starts_over_instead_of_growing(
    store: Store, tmp_path: Path
) -> None:
    checkpoints = checkpoints_of(store)
    checkpoints._every, checkpoints._restart_frames = 4, 64
    big = {"text": "x" * 6000}  # two overflow pages and more a commit
    for _ in range(400):  # the loop commits on while each checkpoint runs
        await accept(store, 1, big)
        await asyncio.sleep(0)  # as a server's loop turns between requests
    await checkpointed(checkpoints)
    # without the restart every page written stays in the file: ~4,800 frames here
    assert wal_frames(tmp_path / FILE) < 1000
