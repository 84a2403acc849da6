"""The README's "Durable steps and waits" runs as written: `tether dev --app examples.durable:app`
and its curl calls (on a free port instead of 8000), then the order ships."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.client import Api, assert_clean_log
from tests.harness import ROOT, start_dev

APP = "examples.durable:app"
SECTION = "## Durable steps and waits"


def readme_commands() -> tuple[str, list[str]]:
    """The section's shell block: the server command, and the client lines after it."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    lines = [line for line in block.splitlines() if line.strip()]
    return lines[0], lines[1:]


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[str]:
    proc, base = start_dev(tmp_path, APP, proxy_auth=False)  # as the README runs it
    try:
        yield base
    finally:
        proc.stop()


def test_the_readme_serves_the_durable_example() -> None:
    server, _ = readme_commands()
    assert server.endswith(f"tether dev --app {APP}")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_the_readme_curl_calls_park_resume_and_ship_the_order(dev: str) -> None:
    _, lines = readme_commands()
    uid = "uid() { python3 -c 'import uuid; print(uuid.uuid4())'; }"
    host = dev.removeprefix("http://")
    # each call's answer on a line of its own (curl -s adds no newline)
    calls = [part for line in lines for part in (line, "echo" if line.startswith("curl") else "")]
    script = "\n".join([uid, *calls, 'echo "ID=$ID"']).replace("localhost:8000", host)
    shell = await asyncio.create_subprocess_exec(
        "bash", "-e", "-c", script, stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(shell.communicate(), 60)
    assert shell.returncode == 0
    out = stdout.decode()
    invocation_id = out.rsplit("ID=", 1)[1].strip()
    parked, status, answered = (json.loads(line) for line in out.splitlines()[:3])
    assert parked["status"] == "waiting" and parked["status_url"].endswith(invocation_id)
    assert status["waiting_for"][0]["wait"] == "approval"
    assert status["waiting_for"][0]["prompt"] == "Approve buying laptop for 1200?"
    assert answered["status"] in {"queued", "active", "waiting"}
    assert out.count("event: run.resumed") == 2  # after the approval, after the shipping sleep
    assert "event: run.completed" in out

    async with aiohttp.ClientSession() as session:
        api = Api(session, dev)
        api.owner = ""  # the README's curl sends no identity: the local user of tether dev
        await check_shipped(api, invocation_id)


async def check_shipped(api: Api, invocation_id: str) -> None:
    code, done = await api.get(invocation_id)
    assert code == 200 and done["status"] == "completed", done
    output = done["output"]
    assert output["status"] == "shipped" and output["order"]["order_id"].startswith("ord-")
    assert done["attempt"] == 3  # parked twice: the approval, then the shipping sleep
    events = await api.events(invocation_id)
    assert_clean_log(events)
    assert [e.type for e in events if e.type.startswith("run.")] == [
        "run.started",
        "run.waiting",
        "run.resumed",
        "run.waiting",
        "run.resumed",
        "run.completed",
    ]
