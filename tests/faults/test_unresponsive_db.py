"""PostgreSQL stops answering one worker without an error (a partition, a hung server, a
fail-over that leaves its connections half-open): its heartbeat statement hangs rather than
fails. The worker must still stop its attempts once they go stale, as when PostgreSQL refuses
it (docs/operations.md, "a worker cannot reach PostgreSQL for stale_after"), so they do not run
beside the replacements another worker makes.

The worker reaches the test's database through a TCP proxy this test starts and freezes; the
shared PostgreSQL is never touched.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.client import new_id
from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import (
    STALE_AFTER,
    Db,
    api_for,
    assert_clean_events,
    attempts_started,
    holding,
    log_has,
    start_workers,
    until,
)
from tests.harness import ROOT, free_port, wait_for
from tests.services import reachable

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


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


async def test_a_worker_whose_database_stops_answering_stops_its_attempts_itself(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, proxy_to: ProxyTo
) -> None:
    proxied_url, proxy = proxy_to(fresh_db)
    cluster = make_cluster(fresh_db, redis_url)
    cut_off = make_cluster(proxied_url, redis_url)
    cut_off.queue = cluster.queue
    _, base = cluster.start_gateway()
    [worker] = start_workers(cut_off, 1)
    db = Db(fresh_db)
    ids = [new_id() for _ in range(2)]
    async with api_for(base) as api:
        for invocation_id in ids:
            spec = {"default": {"emit": 100, "emit_sleep": 0.2}}  # 20 s of ticks
            body = {"id": invocation_id, "input": spec, "background": True}
            assert (await api.post(body))[0] == 202
        await until(lambda: db.all_match(ids, holding(2)), 30, "the runs on the cut-off worker")
        start_workers(cluster, 1)  # a worker that still reaches the database: it replaces them

        proxy.send_signal(signal.SIGSTOP)  # the cut-off worker's statements hang from now on
        await until(lambda: log_has(worker, "no heartbeat for"), STALE_AFTER + 5, "it to give up")
        await until(
            lambda: worker.log().count("stopped without finishing (superseded)") == len(ids),
            5,
            "its attempts to stop while the database is still out of its reach",
        )
        proxy.send_signal(signal.SIGCONT)

        await until(
            lambda: db.all_match(ids, lambda r: r["status"] == "completed"), 60, "every run"
        )
        for invocation_id in ids:
            events = db.events(invocation_id)
            assert_clean_events(events)
            assert attempts_started(events) == [1, 2], invocation_id
