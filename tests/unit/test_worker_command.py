"""``tether worker`` runs Dramatiq's CLI on Tether's actors, configured from the settings."""

from __future__ import annotations

import os
import sys

from tether.settings import load_settings
from tether.worker.command import worker_command


def test_the_worker_command_is_dramatiqs_cli_on_tethers_actors_and_queue() -> None:
    settings = load_settings(
        None,
        app="my.agents:app",
        worker={"queue": "agents", "poll_timeout_ms": 250},
        timers={"shutdown_grace": 7},
    )
    command = worker_command(
        settings, processes=3, threads=5, config_file="tether.yaml", environ={"KEEP": "1"}
    )
    assert command.argv[:4] == [sys.executable, "-m", "dramatiq", "tether.worker.actors"]
    flags = dict(zip(command.argv[4::2], command.argv[5::2], strict=True))
    assert flags == {
        "--processes": "3",
        "--threads": "5",
        "--queues": "agents",
        "--worker-shutdown-timeout": "12000",
    }
    assert command.env["KEEP"] == "1" and command.env["TETHER_APP"] == "my.agents:app"
    assert command.env["TETHER_CONFIG"] == os.path.abspath("tether.yaml")
    assert command.env["dramatiq_worker_timeout"] == "250"
    assert command.env["dramatiq_queue_prefetch"] == "5"  # every fetched message on a thread
