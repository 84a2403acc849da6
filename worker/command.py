"""The command ``tether worker`` becomes: Dramatiq's own CLI, running Tether's actors."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from tether.settings import Settings


@dataclass(frozen=True, slots=True)
class WorkerCommand:
    """A program to exec: its argv (``argv[0]`` is the executable) and its environment."""

    argv: list[str]
    env: dict[str, str]


def worker_command(
    settings: Settings,
    *,
    processes: int,
    threads: int,
    config_file: str | None,
    environ: Mapping[str, str],
) -> WorkerCommand:
    """Dramatiq's CLI over :mod:`tether.worker.actors` with ``processes`` worker processes of
    ``threads`` threads, on the settings' queue. Its worker processes read the settings again
    (the app, the YAML file, the environment); they get ``worker.poll_timeout_ms`` as Dramatiq's
    idle timeout, ``threads`` as their prefetch and ``shutdown_grace`` + 5 s to stop."""
    env = dict(environ)
    env["TETHER_APP"] = settings.app
    if config_file:
        env["TETHER_CONFIG"] = os.path.abspath(config_file)
    env["dramatiq_worker_timeout"] = str(settings.worker.poll_timeout_ms)
    # as many messages in hand as threads (Dramatiq's default is twice as many): every message a
    # process fetches is on a thread at once, so a full process, whose threads each wait with one
    # token and send their message's others back, has none waiting unseen in its work queue
    env["dramatiq_queue_prefetch"] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    grace_ms = int((settings.timers.shutdown_grace + 5) * 1000)
    argv = [
        sys.executable,
        "-m",
        "dramatiq",
        "tether.worker.actors",
        "--processes",
        str(processes),
        "--threads",
        str(threads),
        "--queues",
        settings.worker.queue,
        "--worker-shutdown-timeout",
        str(grace_ms),
    ]
    return WorkerCommand(argv, env)
