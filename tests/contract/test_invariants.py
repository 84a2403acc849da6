"""Invariants under random operation sequences, in both modes: a seeded run of
:class:`tests.contract.fuzz_driver.Fuzz` (a short one by default; ``TETHER_FUZZ_OPS`` and
``TETHER_FUZZ_SEED`` choose its length and seed), against ``tether dev``'s app served in this
process on the embedded store, then against a gateway and two worker processes on PostgreSQL and
Redis (its gateway on ``TETHER_FUZZ_PORT`` when set, else a free port). A failure names its seed:
run again with ``TETHER_FUZZ_SEED=<seed>``."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.apps.fuzz_app import app as fuzz_app
from tests.conftest import ADMIN
from tests.contract.fuzz_driver import Fuzz
from tests.harness import Cluster
from tests.inprocess import served
from tests.openapi_check import open_session
from tests.services import private_migrated_database

OPS = int(os.environ.get("TETHER_FUZZ_OPS", "150"))
TIMERS = {"sync_timeout": 1, "inline_sleep_max": 0.2}
AUTH = {"mode": "forwarded", "trusted_proxies": ["127.0.0.1/32"], "admins": [ADMIN]}


def seed() -> int:
    return int(os.environ.get("TETHER_FUZZ_SEED") or random.randrange(2**32))


async def fuzz(base: str, effects: Path) -> None:
    chosen = seed()
    async with open_session(timeout=aiohttp.ClientTimeout(total=120)) as session:
        run = Fuzz(base, session, chosen, effects, OPS)
        try:
            await run.run()
            await run.check()
            print(run.summary())
        except BaseException as exc:
            exc.add_note(f"fuzz seed: TETHER_FUZZ_SEED={chosen} (ops {OPS})")
            raise


async def test_invariants_hold_on_the_embedded_store(tmp_path: Path) -> None:
    async with served(tmp_path, fuzz_app, timers=dict(TIMERS), auth=AUTH) as server:
        await fuzz(server.base, tmp_path / "effects")


@pytest.fixture
def fuzz_cluster(redis_url: str, tmp_path: Path) -> Iterator[str]:
    """A gateway and two worker processes of the fuzz app on a database of their own: the
    session's shared workers run another app and would claim the fuzz app's invocations."""
    with private_migrated_database() as database:
        yield from started(database, redis_url, tmp_path)


def started(database: str, redis_url: str, tmp_path: Path) -> Iterator[str]:
    env = {
        "TETHER_TIMERS__SYNC_TIMEOUT": "1",
        "TETHER_TIMERS__INLINE_SLEEP_MAX": "0.2",
        "TETHER_AUTH__ADMINS": ADMIN,
    }
    cluster = Cluster(
        database, redis_url, tmp_path, app="tests.apps.fuzz_app:app", env_overrides=env
    )
    try:
        port = os.environ.get("TETHER_FUZZ_PORT")
        _, base = cluster.start_gateway(port=int(port) if port else None)
        cluster.start_worker(processes=2)
        yield base
    finally:
        cluster.stop()


async def test_invariants_hold_on_the_distributed_servers(
    fuzz_cluster: str, tmp_path: Path
) -> None:
    await fuzz(fuzz_cluster, tmp_path / "effects")
