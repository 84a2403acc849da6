"""Fixtures of the fault tier: a fresh database per test and clusters on fast timers.

Each test gets its own database (a reaper only ever sees its own test's invocations) and its own
Dramatiq queue; teardown kills whatever is left, frozen processes included, and prints the
processes' logs when the test failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.faults.harness_ext import FAST_TIMERS, PrivatePostgres, PrivateRedis, hard_stop
from tests.harness import ROOT, Cluster, free_port, wait_for
from tests.services import PG_ADMIN_URL, create_database, drop_database, reachable, require
from tether.store.store import Store


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[FAILED] = report.failed
    return report


FAILED = pytest.StashKey[bool]()


def migrate(url: str) -> None:
    async def run() -> None:
        store = Store.postgres(url, pool_size=1)
        try:
            await store.migrate()
        finally:
            await store.close()

    asyncio.run(run())


@pytest.fixture
def fresh_db() -> Iterator[str]:
    """A new, migrated database on the shared PostgreSQL server, dropped afterwards."""
    require(PG_ADMIN_URL, 5432, "PostgreSQL")
    url = create_database()
    try:
        migrate(url)
        yield url
    finally:
        drop_database(url)


MakeCluster = Callable[..., Cluster]


def drop_queue(cluster: Cluster) -> None:
    """Delete the Dramatiq keys of a test's private queue (best effort: Redis may be gone)."""
    import redis

    with contextlib.suppress(redis.RedisError):
        client = redis.Redis.from_url(cluster.redis_url, socket_timeout=2)
        try:
            keys = [*client.scan_iter(match=f"dramatiq:{cluster.queue}*", count=1000)]
            keys += [*client.scan_iter(match=f"dramatiq:__acks__.*.{cluster.queue}*", count=1000)]
            if keys:
                client.delete(*keys)
        finally:
            client.close()


@pytest.fixture
def make_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeCluster]:
    clusters: list[Cluster] = []

    def make(
        database_url: str, redis_url: str, app: str = "tests.faults.app:app", **env: str
    ) -> Cluster:
        workdir = tmp_path / f"cluster-{len(clusters)}"
        workdir.mkdir()
        cluster = Cluster(
            database_url, redis_url, workdir, app=app, env_overrides={**FAST_TIMERS, **env}
        )
        clusters.append(cluster)
        return cluster

    yield make
    procs = [p for c in clusters for p in c.procs]
    hard_stop(procs)
    for cluster in clusters:
        drop_queue(cluster)
    if request.node.stash.get(FAILED, False):
        for proc in procs:
            tail = "\n".join(proc.log().splitlines()[-120:])
            print(f"\n===== {proc.name} (pid {proc.pid}) {proc.log_path.name} =====\n{tail}")


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    try:
        server = PrivateRedis(tmp_path)
    except FileNotFoundError as exc:
        pytest.skip(f"no private Redis: {exc}")
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    try:
        server = PrivatePostgres()
    except (OSError, KeyError) as exc:  # no binaries, no runuser, no postgres user
        pytest.skip(f"cannot run a private PostgreSQL ({exc}); the shared one is never restarted")
    try:
        try:
            server.start()
        except subprocess.SubprocessError as exc:
            pytest.skip(
                f"a private PostgreSQL did not start ({exc}); the shared one is never restarted"
            )
        migrate(server.url)
        yield server
    finally:
        server.destroy()


ProxyTo = Callable[[str], tuple[str, "subprocess.Popen[bytes]"]]


@pytest.fixture
def proxy_to(tmp_path: Path) -> Iterator[ProxyTo]:
    """Starts a proxy to a database URL's server; gives the URL through it, and the proxy."""
    started: list[subprocess.Popen[bytes]] = []

    def start(database_url: str) -> tuple[str, subprocess.Popen[bytes]]:
        parsed = urlparse(database_url.replace("postgresql+psycopg://", "postgresql://", 1))
        port = free_port()
        with (tmp_path / f"proxy-{port}.log").open("wb") as log:
            popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.faults.tcp_proxy",
                    str(port),
                    parsed.hostname or "127.0.0.1",
                    str(parsed.port or 5432),
                ],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.append(popen)
        wait_for(lambda: reachable(f"tcp://127.0.0.1:{port}", port), 10, "the proxy")
        netloc = f"{parsed.username or 'postgres'}@127.0.0.1:{port}"
        return database_url.replace(parsed.netloc, netloc, 1), popen

    yield start
    for popen in started:
        popen.send_signal(signal.SIGCONT)
        popen.kill()
        popen.wait(10)
