"""Real Tether processes for the contract and fault tests: gateway(s), workers, `tether dev`.

Everything waits on conditions (a port answering, a database row), never on fixed sleeps.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tests.procs import LOOPBACK_PROXY_AUTH, Proc, free_port, http_ok, wait_for

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["Cluster", "Launch", "Proc", "free_port", "http_ok", "start_dev", "wait_for"]
T = TypeVar("T")


@dataclass(frozen=True)
class Launch:
    """How the tests start ``tether``: by default the checkout's code, from the checkout (the
    tests' own apps import from it). The install tests run an installed ``tether`` script from a
    user's project instead, with nothing of the checkout importable."""

    command: tuple[str, ...] = (sys.executable, "-m", "tether.cli")
    cwd: Path = ROOT
    pythonpath: str | None = str(ROOT)

    def env(self, overrides: dict[str, str]) -> dict[str, str]:
        """The parent's environment without its TETHER_* settings and PYTHONPATH, plus ours."""
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("TETHER_") and k != "PYTHONPATH"
        }
        if self.pythonpath is not None:
            env["PYTHONPATH"] = self.pythonpath
        env["PYTHONUNBUFFERED"] = "1"
        env.update(overrides)
        return env


@dataclass
class Cluster:
    """Gateways and workers on a real PostgreSQL database and Redis, with their own queue."""

    database_url: str
    redis_url: str
    workdir: Path
    app: str = "tests.apps.contract:app"
    env_overrides: dict[str, str] = field(default_factory=dict)
    queue: str = field(default_factory=lambda: f"tether-test-{uuid.uuid4().hex[:8]}")
    procs: list[Proc] = field(default_factory=list)
    launch: Launch = field(default_factory=Launch)

    def env(self) -> dict[str, str]:
        return self.launch.env(
            {
                "TETHER_DATABASE_URL": self.database_url,
                "TETHER_REDIS_URL": self.redis_url,
                "TETHER_APP": self.app,
                "TETHER_WORKER__QUEUE": self.queue,
                **LOOPBACK_PROXY_AUTH,
                **self.env_overrides,
            }
        )

    def _spawn(self, name: str, args: list[str]) -> Proc:
        log_path = self.workdir / f"{name}-{len(self.procs)}.log"
        with log_path.open("wb") as handle:
            popen = subprocess.Popen(
                [*self.launch.command, *args],
                cwd=self.launch.cwd,
                env=self.env(),
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def start_gateway(self, processes: int = 1, port: int | None = None) -> tuple[Proc, str]:
        port = free_port() if port is None else port
        proc = self._spawn(
            "gateway", ["gateway", "--port", str(port), "--processes", str(processes)]
        )
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: http_ok(f"{base}/healthz") or proc.popen.poll() is not None, 30, "gateway")
        if proc.popen.poll() is not None:
            raise RuntimeError(f"gateway exited:\n{proc.log()}")
        return proc, base

    def start_worker(self, processes: int = 1, threads: int = 2) -> Proc:
        proc = self._spawn(
            "worker", ["worker", "--processes", str(processes), "--threads", str(threads)]
        )
        wait_for(
            lambda: "Worker process is ready" in proc.log() or proc.popen.poll() is not None,
            60,
            "worker boot",
        )
        if proc.popen.poll() is not None:
            raise RuntimeError(f"worker exited:\n{proc.log()}")
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


def start_dev(
    workdir: Path,
    app: str | None,
    env_overrides: dict[str, str] | None = None,
    db: str = ":memory:",
    launch: Launch = Launch(),
    proxy_auth: bool = True,
) -> tuple[Proc, str]:
    """`tether dev` as a real subprocess on the embedded store (``app`` None: its default app).

    ``proxy_auth``: identities from ``X-Forwarded-*`` headers sent from loopback, as the contract
    suite sends them; False: `tether dev` as a newcomer runs it, single-user."""
    port = free_port()
    app_args = [] if app is None else ["--app", app]
    log_path = workdir / f"dev-{port}.log"
    with log_path.open("wb") as handle:
        popen = subprocess.Popen(
            [*launch.command, "dev", *app_args, "--port", str(port), "--db", db],
            cwd=launch.cwd,
            env=launch.env(
                {**(LOOPBACK_PROXY_AUTH if proxy_auth else {}), **(env_overrides or {})}
            ),
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc = Proc("dev", popen, log_path)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_ok(f"{base}/healthz") or popen.poll() is not None, 30, "tether dev")
    if popen.poll() is not None:
        raise RuntimeError(f"tether dev exited:\n{proc.log()}")
    return proc, base
