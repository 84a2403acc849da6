"""A non-editable install works outside the checkout: the package is ``tether`` alone, every
command is listed, ``tether dev`` serves its default example, and a command that lacks something
says what, without a traceback."""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.client import Api, new_id
from tests.harness import ROOT, start_dev
from tests.install.installed import Installed
from tests.procs import free_port
from tether.cli import build_parser

PROBE = """
import importlib, importlib.resources, importlib.util, json, pkgutil, tether
modules = [m.name for m in pkgutil.walk_packages(tether.__path__, "tether.")]
for name in modules:
    if not name.endswith(".__main__"):
        importlib.import_module(name)
migrations = importlib.resources.files("tether.migrations")
print(json.dumps({
    "tether": tether.__file__,
    "modules": modules,
    "importable": [n for n in ("shared", "gateway", "worker", "tests", "bench")
                   if importlib.util.find_spec(n) is not None],
    "migrations": {d: sorted(p.name for p in (migrations / d).iterdir() if p.name.endswith(".sql"))
                   for d in ("postgresql", "sqlite")},
}))
"""


def command_names() -> list[str]:
    (commands,) = (
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    return list(commands.choices)


def no_traceback(done: subprocess.CompletedProcess[str]) -> str:
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    return output


def test_the_installed_package_is_tether_alone_with_its_migrations(
    installed: Installed, elsewhere: Path
) -> None:
    done = subprocess.run(
        [installed.python, "-c", PROBE], cwd=elsewhere, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert Path(facts["tether"]).is_relative_to(installed.venv)
    assert {"tether.cli", "tether.gateway", "tether.worker", "tether.store"} <= set(
        facts["modules"]
    )
    assert facts["importable"] == []
    for dialect, names in facts["migrations"].items():
        assert names == sorted(p.name for p in (ROOT / "migrations" / dialect).glob("*.sql"))
        assert names, dialect


@pytest.mark.parametrize("name", ["shared", "gateway", "worker"])
def test_the_folders_of_the_checkout_are_not_top_level_packages(
    installed: Installed, elsewhere: Path, name: str
) -> None:
    done = subprocess.run(
        [installed.python, "-c", f"import {name}"], cwd=elsewhere, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert f"No module named '{name}'" in done.stderr


def test_help_lists_every_command_and_the_readme_table_has_a_row_for_each(
    installed: Installed, elsewhere: Path
) -> None:
    done = installed.run(["--help"], elsewhere)
    assert done.returncode == 0, done.stderr
    readme = (ROOT / "README.md").read_text()
    for name in command_names():
        assert name in done.stdout
        assert f"| `tether {name}" in readme, f"README's commands table lacks tether {name}"


async def test_dev_serves_its_default_example(installed: Installed, elsewhere: Path) -> None:
    proc, base = start_dev(elsewhere, None, launch=installed.launch(elsewhere))
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            status, body = await Api(session, base).post(
                {"id": new_id(), "input": {"steps": 1, "delay": 0}}
            )
        assert (status, body["status"]) == (200, "completed"), body
        assert body["output"] == {"echo": {"steps": 1, "delay": 0}, "steps": 1}
        assert "app 'hello'" in proc.log()
    finally:
        proc.stop()


@pytest.fixture
def nowhere() -> Iterator[dict[str, str]]:
    """Settings pointing at a PostgreSQL and a Redis that nothing listens on (with a password
    that must never be printed)."""
    port = free_port()
    yield {
        "TETHER_DATABASE_URL": f"postgresql+psycopg://tether:s3cret@127.0.0.1:{port}/tether",
        "TETHER_REDIS_URL": f"redis://:s3cret@127.0.0.1:{port}/0",
    }


@pytest.mark.parametrize("command", [["migrate"], ["reap"], ["tenants", "list"]])
def test_a_command_without_its_database_says_which_and_where(
    installed: Installed, elsewhere: Path, nowhere: dict[str, str], command: list[str]
) -> None:
    done = installed.run(command, elsewhere, nowhere)
    output = no_traceback(done)
    assert done.returncode == 1
    assert "cannot use PostgreSQL at postgresql+psycopg://***@127.0.0.1:" in done.stderr
    assert "TETHER_DATABASE_URL" in done.stderr
    assert "s3cret" not in output


def test_bench_outside_a_checkout_says_it_needs_one(installed: Installed, elsewhere: Path) -> None:
    done = installed.run(["bench", "--quick"], elsewhere)
    no_traceback(done)
    assert done.returncode == 2
    assert "source checkout" in done.stderr


def test_bench_from_the_checkout_root_hands_its_arguments_to_the_benchmark(
    installed: Installed,
) -> None:
    done = installed.run(["bench", "--quick", "no-such-scenario"], ROOT)
    no_traceback(done)
    assert done.returncode == 2
    assert "python -m bench: error: unknown scenario(s): no-such-scenario" in done.stderr


def test_run_agent_without_an_agents_folder_says_how_to_give_one(
    installed: Installed, elsewhere: Path
) -> None:
    done = installed.run(["run-agent", "hello"], elsewhere)
    no_traceback(done)
    assert done.returncode == 2
    assert "--agents DIR" in done.stderr


def test_dev_with_a_missing_agents_folder_says_so(installed: Installed, elsewhere: Path) -> None:
    done = installed.run(["dev", "--agents", "examples/agents", "--db", ":memory:"], elsewhere)
    no_traceback(done)
    assert done.returncode == 2
    assert "'examples/agents' is not a folder" in done.stderr


def test_migrate_applies_the_migrations_shipped_in_the_package(
    installed: Installed, elsewhere: Path, fresh_database: str
) -> None:
    env = {"TETHER_DATABASE_URL": fresh_database}
    first = installed.run(["migrate"], elsewhere, env)
    assert first.returncode == 0, first.stderr
    files = sorted((ROOT / "migrations" / "postgresql").glob("*.sql"))
    versions = [path.name.split("_")[0] for path in files]
    assert f"applied {len(versions)} migration(s): {', '.join(versions)}" in first.stdout
    again = installed.run(["migrate"], elsewhere, env)
    assert "applied 0 migration(s): none pending" in again.stdout


def test_reap_on_a_database_without_tables_says_to_migrate_first(
    installed: Installed, elsewhere: Path, fresh_database: str
) -> None:
    done = installed.run(["reap"], elsewhere, {"TETHER_DATABASE_URL": fresh_database})
    no_traceback(done)
    assert done.returncode == 1
    assert "has no Tether tables: run `tether migrate` first" in done.stderr
