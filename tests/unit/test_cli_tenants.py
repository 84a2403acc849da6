"""``tether tenants``, run as the real command (a subprocess) on a private PostgreSQL database and
on an SQLite file: what it writes is what the store reads, and a refused value writes nothing."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.harness import Launch
from tether.store.schema import NewInvocation
from tether.store.store import Store
from tether.store.tenants import TenantLimits

T = TypeVar("T")


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[list[str], Store]]:
    """The command's database options, and a store on the same database."""
    if request.param == "sqlite":
        path = str(tmp_path / "dev.db")
        store = Store.embedded(path)
        options = ["--db", path]
    else:
        from tests.services import PG_ADMIN_URL, create_database, drop_database, require

        require(PG_ADMIN_URL, 5432, "PostgreSQL")
        url = create_database()
        request.addfinalizer(lambda: drop_database(url))
        store = Store.postgres(url, pool_size=1)
        options = ["--database-url", url]
    asyncio.run(store.migrate())
    try:
        yield options, store
    finally:
        asyncio.run(store.close())


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


def read(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def test_set_show_list_and_remove(where: tuple[list[str], Store]) -> None:
    options, store = where
    done = tether("tenants", "set", "acme", "--max-active", "3", "--rate", "2.5", *options)
    assert done.returncode == 0, done.stderr
    row = read(store.tenants.row("acme"))
    assert row is not None and row.limits == TenantLimits(max_active=3, rate=2.5)
    lifted = tether("tenants", "set", "acme", "--max-active", "none", "--weight", "2", *options)
    assert lifted.returncode == 0, lifted.stderr
    row = read(store.tenants.row("acme"))
    assert row is not None and row.limits == TenantLimits(weight=2.0, rate=2.5)

    read(store.accept(NewInvocation("7" * 8 + "-0000-4000-8000-" + "0" * 12, "bob", None, [], "h")))
    shown = tether("tenants", "show", "bob", "--json", *options)
    assert json.loads(shown.stdout)["open"] == {"queued": 1, "running": 0, "waiting": 0}
    changed = tether("tenants", "set", "bob", "--max-active", "2", "--json", *options)
    assert json.loads(changed.stdout)["open"] == {"queued": 1, "running": 0, "waiting": 0}
    assert "open: queued 1" in tether("tenants", "set", "bob", "--weight", "2", *options).stdout
    listing = json.loads(tether("tenants", "list", "--json", *options).stdout)
    assert [t["tenant"] for t in listing["tenants"]] == ["acme", "bob"]
    text = tether("tenants", "list", *options).stdout
    assert "acme\t2.0\tnone\tnone\t2.5" in text

    removed = tether("tenants", "remove", "acme", *options)
    assert removed.returncode == 0 and "removed" in removed.stdout
    assert read(store.tenants.row("acme")) is None


def test_the_defaults_and_the_global_cap(where: tuple[list[str], Store]) -> None:
    options, store = where
    assert tether("tenants", "set", "--defaults", "--max-queued", "10", *options).returncode == 0
    assert read(store.tenants.effective(["anyone"]))["anyone"].max_queued == 10
    assert tether("tenants", "set", "--global", "--max-active", "5", *options).returncode == 0
    assert read(store.tenants.global_max_active()) == 5
    lifted = tether("tenants", "set", "--global", "--max-active", "none", *options)
    assert lifted.returncode == 0 and lifted.stdout.strip() == "global max_active: none"
    assert read(store.tenants.global_max_active()) is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["set", "acme", "--max-active", "-1"], "max_active must be"),
        (["set", "acme", "--max-active", "x"], "--max-active: 'x' is not a whole number"),
        (["set", "acme", "--max-active", "3_0"], "'3_0' is not a whole number"),  # was 30
        (["set", "acme", "--max-active", "\u0663"], "is not a whole number"),  # Arabic 3: was 3
        (["set", "acme", "--rate", "1_000.5"], "--rate: '1_000.5' is not a number"),
        (["set", "acme", "--rate", "nan"], "rate must be a finite number"),
        (["set", "acme", "--rate", "5e9"], "rate must be at most 2147483647"),
        (["set", "acme", "--budget-period", "0.5"], "budget_period must be at least 1"),
        (["set", "acme", "--weight", "none"], "weight cannot be lifted"),  # was: "must be a
        (["set", "acme", "--budget-period", "none"], "budget_period cannot be lifted"),  # number"
        (["set", "acme", "--on-budget", "shrug"], "on_budget must be one of"),
        (["set", "acme"], "nothing to set"),
        (["set", "*", "--weight", "2"], "use --defaults"),
        (["show", "*"], "`tether tenants list` shows them"),  # was "use --defaults": no such
        (["remove", "*"], "`tether tenants set --defaults` changes them"),  # option there
        (["set", "--max-active", "1"], "name a tenant"),
        (["set", "--defaults", "acme", "--max-active", "1"], "drop the name 'acme'"),
        (["set", "--global", "--weight", "2"], "--global takes --max-active alone"),
        (["show", "a" * 257], "a tenant name is longer than 256 characters"),
    ],
)
def test_a_value_no_tenant_may_have_exits_2_and_writes_nothing(
    where: tuple[list[str], Store], args: list[str], says: str
) -> None:
    options, store = where
    done = tether("tenants", *args, *options)
    assert done.returncode == 2
    assert says in done.stderr and "Traceback" not in done.stderr
    assert read(store.tenants.rows()) == []
    assert read(store.tenants.global_max_active()) is None


def test_a_missing_sqlite_file_is_refused(tmp_path: Path) -> None:
    done = tether("tenants", "list", "--db", str(tmp_path / "none.db"))
    assert done.returncode == 2 and "no such file" in done.stderr
    assert not (tmp_path / "none.db").exists()


def test_an_empty_database_url_is_refused_not_read_as_the_setting() -> None:
    """``--database-url "$URL"`` with ``URL`` unset: it used to change the limits on the
    ``database_url`` setting's database (here the environment's) instead."""
    from tests.services import PG_ADMIN_URL, create_database, drop_database, require

    require(PG_ADMIN_URL, 5432, "PostgreSQL")
    url = create_database()
    store = Store.postgres(url, pool_size=1)
    try:
        read(store.migrate())
        setting = {"TETHER_DATABASE_URL": url}
        args = ["tenants", "set", "team-a", "--max-active", "1", "--database-url", ""]
        done = tether(*args, env=setting)
        assert done.returncode == 2 and "database_url" in done.stderr, done.stderr
        assert read(store.tenants.rows()) == []
    finally:
        read(store.close())
        drop_database(url)
