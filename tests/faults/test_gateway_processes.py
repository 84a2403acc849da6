"""``tether gateway`` as processes: ``kill -9`` of ``tether gateway --processes N`` (the
command's own process) lets its gateway processes notice that their parent is gone, stop as on
SIGTERM and exit, so the port is free for the supervisor's next ``tether gateway`` (they used to
serve on unsupervised, holding it); with ``--port 0`` the log names the port the system chose
(it said 0, or, with one process, nothing)."""

from __future__ import annotations

import os
import re
import signal

import pytest

from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import until
from tests.faults.test_worker_orphan import exited
from tests.harness import Proc
from tests.procs import descendants, http_ok, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.timeout(90)]


async def test_gateway_processes_whose_parent_is_killed_exit_and_free_the_port(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(fresh_db, redis_url)
    gateway, base = cluster.start_gateway(processes=2)
    port = int(base.rsplit(":", 1)[1])
    children = descendants(gateway.pid)
    assert len(children) == 2, children

    os.kill(gateway.pid, signal.SIGKILL)
    gateway.popen.wait(10)
    await until(lambda: all(exited(pid) for pid in children), 30, "the orphans to exit")
    assert gateway.log().count("is gone; stopping gracefully") == 2

    cluster.start_gateway(processes=2, port=port)  # raises if it exited: the port was held


def logged_port(gateway: Proc) -> int | None:
    found = re.search(r"gateway on (?:http://)?127\.0\.0\.1:(\d+)", gateway.log())
    return None if found is None else int(found.group(1))


@pytest.mark.parametrize("processes", [1, 2])
def test_a_gateway_on_port_0_logs_the_port_it_was_given(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, processes: int
) -> None:
    cluster = make_cluster(fresh_db, redis_url)
    gateway = cluster._spawn("gateway", ["gateway", "--port", "0", "--processes", str(processes)])
    wait_for(lambda: gateway.popen.poll() is not None or "gateway on" in gateway.log(), 30, "log")
    port = logged_port(gateway)
    assert port, gateway.log()
    assert wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 30, "healthz")


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])  # SIGTERM: it exits 0
async def test_a_gateway_process_that_dies_stops_its_siblings_and_the_command(
    fresh_db: str, redis_url: str, make_cluster: MakeCluster, how: signal.Signals
) -> None:
    """As a crashed Dramatiq worker process does: the command then exits non-zero for its
    supervisor to restart, instead of serving on with one process fewer."""
    cluster = make_cluster(fresh_db, redis_url)
    gateway, _ = cluster.start_gateway(processes=2)
    doomed, sibling = descendants(gateway.pid)

    os.kill(doomed, how)
    await until(lambda: gateway.popen.poll() is not None, 30, "the command to exit")
    assert gateway.popen.returncode != 0
    await until(lambda: exited(sibling), 30, "the sibling to exit")
    assert "stopping the others" in gateway.log()
