"""A user's project with packages of its own named ``worker``, ``shared`` and ``bench`` (names
Tether's own folders have) is served by the installed ``tether``, run from the project's folder:
its app imports the user's packages, never Tether's."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.client import Api, new_id
from tests.harness import Cluster, start_dev
from tests.install.installed import Installed
from tests.services import private_migrated_database

FILES = {
    "shared/__init__.py": """
        GREETING = "hello from the project's own shared package"
    """,
    "worker/__init__.py": """
        def shout(text: str) -> str:
            return text.upper() + "!"
    """,
    "bench/__main__.py": """
        print("the project's own benchmark")
    """,
    "myapp.py": """
        from shared import GREETING
        from tether import AgentApp, InvocationContext
        from worker import shout

        app = AgentApp(name="user-project")


        @app.invoke
        async def invoke(input, ctx: InvocationContext):
            await ctx.emit({"type": "status", "message": shout("working")})
            return {"greeting": GREETING, "shouted": shout(input["text"])}
    """,
}
EXPECTED = {"greeting": "hello from the project's own shared package", "shouted": "HI THERE!"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text).lstrip())
    return root


async def invoke_and_check(base: str) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        status, body = await Api(session, base).post(
            {"id": new_id(), "input": {"text": "hi there"}}
        )
    assert (status, body["status"]) == (200, "completed"), body
    assert body["output"] == EXPECTED


async def test_dev_serves_a_project_with_its_own_worker_and_shared_packages(
    installed: Installed, project: Path, tmp_path: Path
) -> None:
    proc, base = start_dev(tmp_path, "myapp:app", launch=installed.launch(project))
    try:
        await invoke_and_check(base)
    finally:
        proc.stop()


@pytest.fixture
def cluster(
    installed: Installed, project: Path, redis_url: str, tmp_path: Path
) -> Iterator[Cluster]:
    """``tether gateway`` and ``tether worker`` from the project's folder, on a private queue
    and a database of their own: the session's shared workers (the contract app's) claim
    whatever is queued in the shared one, and would run this project's invocation."""
    with private_migrated_database() as url:
        cluster = Cluster(
            url, redis_url, tmp_path, app="myapp:app", launch=installed.launch(project)
        )
        try:
            yield cluster
        finally:
            cluster.stop()


async def test_gateway_and_worker_serve_a_project_with_its_own_worker_and_shared_packages(
    cluster: Cluster,
) -> None:
    _, base = cluster.start_gateway()
    cluster.start_worker(processes=1, threads=1)
    await invoke_and_check(base)


def test_bench_does_not_run_the_projects_own_bench_package(
    installed: Installed, project: Path
) -> None:
    done = installed.run(["bench"], project)
    assert done.returncode == 2
    assert "source checkout" in done.stderr
    assert "the project's own benchmark" not in done.stdout
