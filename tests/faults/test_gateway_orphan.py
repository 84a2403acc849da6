"""``kill -9`` of ``tether gateway --processes N`` (the command's own process): its gateway
processes notice that their parent is gone, stop as on SIGTERM and exit, so the port is free for
the supervisor's next ``tether gateway``. They used to serve on unsupervised, holding it."""

from __future__ import annotations

import os
import signal

import pytest

from tests.faults.conftest import MakeCluster
from tests.faults.harness_ext import until
from tests.faults.test_worker_orphan import exited
from tests.procs import descendants

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
