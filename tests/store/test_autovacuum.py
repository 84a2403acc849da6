"""The autovacuum check: what PostgreSQL's autovacuum leaves alone of Tether's tables, read from
a real server, and the warning a worker node logs and ``tether migrate`` prints."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tether.store.autovacuum import Coverage, _opted_out, warning_text
from tether.store.store import Store
from tether.worker.node import _check_autovacuum


@pytest.mark.parametrize(
    ("options", "off"),
    [
        ([], False),
        (["fillfactor=90"], False),
        (["autovacuum_enabled=off"], True),
        (["autovacuum_enabled=false"], True),
        (["autovacuum_enabled=fals"], True),
        (["autovacuum_enabled=f"], True),
        (["autovacuum_enabled=no"], True),
        (["autovacuum_enabled=0"], True),
        (["AUTOVACUUM_ENABLED=OFF"], True),
        (["autovacuum_enabled=on"], False),
        (["autovacuum_enabled=true"], False),
        (["autovacuum_enabled=1"], False),
        (["autovacuum_enabled=o"], False),  # not a boolean PostgreSQL would take
        (["fillfactor=90", "autovacuum_enabled=off"], True),
    ],
)
def test_a_table_opts_out_only_with_a_false_autovacuum_enabled(
    options: list[str], off: bool
) -> None:
    assert _opted_out(options) is off


def test_the_warning_names_what_is_off() -> None:
    assert warning_text(Coverage()) is None
    server = warning_text(Coverage(settings_off=("autovacuum",)))
    assert server is not None and "PostgreSQL runs with autovacuum = off" in server
    both = warning_text(Coverage(settings_off=("autovacuum", "track_counts")))
    assert both is not None and "autovacuum = off and track_counts = off" in both
    tables = warning_text(Coverage(tables_off=("tether_events", "tether_invocations")))
    assert tables is not None
    assert "autovacuum_enabled is off for tether_events, tether_invocations" in tables
    everything = warning_text(Coverage(settings_off=("autovacuum",), tables_off=("tether_events",)))
    assert everything is not None
    assert everything.startswith(
        "PostgreSQL runs with autovacuum = off, so autovacuum runs only to prevent wraparound; "
        "autovacuum_enabled is off for tether_events: "
    )
    for text in (server, both, tables, everything):
        assert "VACUUM ANALYZE" in text and "docs/operations.md" in text


@pytest.fixture
async def opted_out(pg: Store) -> AsyncIterator[Store]:
    """``tether_events`` opted out of autovacuum for the test, as it was after."""
    async with pg.engine.begin() as conn:
        await conn.execute(sa.text("ALTER TABLE tether_events SET (autovacuum_enabled = off)"))
    try:
        yield pg
    finally:
        async with pg.engine.begin() as conn:
            await conn.execute(sa.text("ALTER TABLE tether_events RESET (autovacuum_enabled)"))


async def server_settings_off(store: Store) -> tuple[str, ...]:
    async with store.engine.connect() as conn:
        values = {
            name: await conn.scalar(sa.text(f"SELECT current_setting('{name}')"))
            for name in ("autovacuum", "track_counts")
        }
    return tuple(name for name, value in values.items() if value != "on")


async def test_postgres_coverage_reads_the_server_and_each_table(pg: Store) -> None:
    found = await pg.autovacuum_coverage()
    assert found == Coverage(settings_off=await server_settings_off(pg), tables_off=())


async def test_track_counts_off_is_named_whatever_the_server_runs(migrated_pg: str) -> None:
    """Autovacuum needs ``track_counts``; a session of a superuser may turn it off, so this
    reads a setting that is off on any machine."""
    url = sa.make_url(migrated_pg).update_query_dict({"options": "-c track_counts=off"})
    store = Store.postgres(url.render_as_string(hide_password=False), pool_size=1)
    try:
        found = await store.autovacuum_coverage()
    finally:
        await store.close()
    assert found is not None and "track_counts" in found.settings_off
    text = warning_text(found)
    assert text is not None and "track_counts = off" in text


async def test_a_table_set_to_skip_autovacuum_is_named(opted_out: Store) -> None:
    found = await opted_out.autovacuum_coverage()
    assert found is not None
    assert found.tables_off == ("tether_events",)


async def test_a_table_whose_toast_skips_autovacuum_is_named(pg: Store) -> None:
    """A table's large values live in its TOAST table, whose options are its own."""
    async with pg.engine.begin() as conn:
        await conn.execute(
            sa.text("ALTER TABLE tether_invocations SET (toast.autovacuum_enabled = false)")
        )
    try:
        found = await pg.autovacuum_coverage()
    finally:
        async with pg.engine.begin() as conn:
            await conn.execute(
                sa.text("ALTER TABLE tether_invocations RESET (toast.autovacuum_enabled)")
            )
    assert found is not None and found.tables_off == ("tether_invocations",)


async def test_sqlite_has_nothing_to_check(tmp_path: Path) -> None:
    store = Store.embedded(str(tmp_path / "t.db"))
    await store.migrate()
    try:
        assert await store.autovacuum_coverage() is None
    finally:
        await store.close()


async def test_a_node_warns_once_at_start_when_a_table_is_left_alone(
    opted_out: Store, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tether.worker.node"):
        await _check_autovacuum(opted_out)
    warned = [r.getMessage() for r in caplog.records if r.name == "tether.worker.node"]
    assert len(warned) == 1
    assert "tether_events" in warned[0] and "VACUUM ANALYZE" in warned[0]


async def test_a_node_on_sqlite_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store.embedded(str(tmp_path / "t.db"))
    await store.migrate()
    try:
        with caplog.at_level(logging.INFO, logger="tether.worker.node"):
            await _check_autovacuum(store)
    finally:
        await store.close()
    assert not [r for r in caplog.records if r.name == "tether.worker.node"]


async def test_tether_migrate_prints_the_warning(opted_out: Store, migrated_pg: str) -> None:
    from tests.harness import Launch

    launch = Launch()
    command = await asyncio.create_subprocess_exec(
        *launch.command,
        "migrate",
        cwd=launch.cwd,
        env=launch.env({"TETHER_DATABASE_URL": migrated_pg}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(command.communicate(), 60)
    assert command.returncode == 0, err.decode()
    assert "none pending" in out.decode()
    assert "warning: " in err.decode() and "tether_events" in err.decode()


def test_tether_worker_warns_once_however_many_processes_it_runs(
    redis_url: str, tmp_path: Path
) -> None:
    """Each worker process starts a node, but only the command's first checks: three processes,
    one warning."""
    import psycopg

    from tests.harness import Cluster
    from tests.procs import wait_for
    from tests.services import private_migrated_database

    with private_migrated_database() as url:  # no other test's rows for this worker to claim
        dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE tether_events SET (autovacuum_enabled = off)")
        cluster = Cluster(url, redis_url, tmp_path)
        worker = cluster._spawn("worker", ["worker", "--processes", "3", "--threads", "1"])
        warning = "autovacuum_enabled is off for tether_events"
        try:
            wait_for(
                lambda: (
                    (worker.log().count("Worker process is ready") == 3 and warning in worker.log())
                    or worker.popen.poll() is not None
                ),
                90,
                "three worker processes and the warning",
            )
        finally:
            cluster.stop()  # a graceful stop: every process's start is long over by its end
        assert worker.log().count("Worker process is ready") == 3, worker.log()[-3000:]
        assert worker.log().count(warning) == 1, worker.log()[-3000:]
