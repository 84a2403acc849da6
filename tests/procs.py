"""Real processes for the tests and the benchmark: each in its own process group, stopped by
signalling the group, measured through ``/proc``. Every wait is on a condition with a deadline."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

LOOPBACK_PROXY_AUTH = {
    "TETHER_AUTH__MODE": "forwarded",
    "TETHER_AUTH__TRUSTED_PROXIES": "127.0.0.1/32",
}
"""Servers started by the tests and the benchmark believe X-Forwarded-User / -Email from
127.0.0.1, where the test clients connect from, standing in for a trusted proxy: each test can
then be a different owner."""


CHOSEN_PORTS = range(20000, 32768)
"""Where :func:`free_port` picks, below Linux's ephemeral range (32768-60999 by default), where
the kernel puts every socket bound to port 0 (the tests' in-process servers, every client's
outgoing connection). A port the kernel chose and then let go could be bound by another test
process's server before ours started on it (two parallel tests failed so: a probe meant for a
restarted ``tether dev`` reached a fake model server)."""


def free_port() -> int:
    """A loopback port nothing listens on now, for a process started next to bind."""
    for port in random.sample(CHOSEN_PORTS, 64):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port among 64 tried in {CHOSEN_PORTS}")


def wait_for(predicate: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tree(self) -> list[int]:
        """This process and all its descendants (Dramatiq and gateway children)."""
        return [self.pid, *descendants(self.pid)]

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.tree())

    def peak_rss_mb(self) -> float:
        """The largest peak resident set size (VmHWM) among the process tree."""
        return max((peak_rss_kb(pid) for pid in self.tree()), default=0) / 1024

    def stop(self, timeout: float = 20.0) -> None:
        if self.popen.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait(10)

    def signal(self, sig: signal.Signals) -> None:
        """Signal the whole process group (Dramatiq's worker children included)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)  # the group this process leads, which we started


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    children = _children_map()
    out: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        out.append(child)
        stack.extend(children.get(child, []))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (its own, not its children's)."""
    return _stat_cpu(Path(f"/proc/{pid}/stat"))


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU time of each thread of one process, by thread id (none if it is gone)."""
    try:
        tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return {}
    return {tid: _stat_cpu(Path(f"/proc/{pid}/task/{tid}/stat")) for tid in tids}


def _stat_cpu(stat: Path) -> float:
    """utime + stime of a ``/proc`` ``stat`` file, in seconds (0 when it is gone)."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pids_named(name: str) -> list[int]:
    """Processes whose command name is ``name`` (e.g. ``redis-server``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() == name:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def peak_rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
