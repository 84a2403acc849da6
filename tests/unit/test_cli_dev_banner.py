"""``tether dev`` says where it listens once it does: with ``--port 0`` the port the system
chose, which answers."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.harness import Launch


def test_dev_on_port_0_names_the_port_it_was_given(tmp_path: Path) -> None:
    launch = Launch()
    command = [*launch.command, "dev", "--port", "0", "--db", str(tmp_path / "dev.db")]
    with subprocess.Popen(
        command,
        cwd=launch.cwd,
        env=launch.env({}),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            listening(process)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


def listening(process: subprocess.Popen[str]) -> None:
    """The banner names the port, and that port answers."""
    assert process.stdout is not None
    with ThreadPoolExecutor(1) as reader:  # a server that never says it listens: 60 s, then
        banner = reader.submit(process.stdout.readline).result(timeout=60)  # the kill ends it
    found = re.match(r"Tether dev server on http://127\.0\.0\.1:(\d+) \(app ", banner)
    assert found is not None, banner
    port = int(found.group(1))
    assert port > 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
        assert r.status == 200 and json.load(r)["status"] == "ok"
