"""Fault-test helpers: fast timers, database reads, worker pids, private Redis and PostgreSQL.

Every wait polls a condition with a deadline. Signals only ever go to processes this test
started (a pid read from ``tether_invocations.worker`` is checked against our process groups).
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import inspect
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
from psycopg.rows import dict_row

from tests.client import Api
from tests.harness import Cluster, Proc, free_port, wait_for
from tether.store.liveness import LOCK_NAMESPACE

# Fast durability timers: a dead attempt is replaced ~3.5 s after its last heartbeat.
STALE_AFTER = 3.0
FAST_TIMERS = {
    "TETHER_TIMERS__HEARTBEAT_INTERVAL": "0.5",
    "TETHER_TIMERS__STALE_AFTER": str(STALE_AFTER),
    "TETHER_TIMERS__REAPER_INTERVAL": "0.5",
    "TETHER_TIMERS__REQUEUE_AFTER": "3",
    "TETHER_TIMERS__RECOVERY_BACKOFF": "0.5",
    "TETHER_TIMERS__SHUTDOWN_GRACE": "10",
    "TETHER_TIMERS__SYNC_TIMEOUT": "60",
}
TERMINAL = {"completed", "failed", "cancelled"}
TERMINAL_EVENTS = {"run.completed", "run.failed", "run.cancelled"}
Row = dict[str, Any]


async def until(predicate: Callable[[], Any], within: float = 30.0, what: str = "condition") -> Any:
    """Poll ``predicate`` (sync or async) until it returns something truthy, or fail."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.05)


class Db:
    """Reads one test database; a connection per call, so it survives a server restart."""

    def __init__(self, url: str) -> None:
        self.dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2) as conn:
            return conn.cursor(row_factory=dict_row).execute(sql, tuple(params)).fetchall()

    def try_query(self, sql: str, params: Iterable[Any] = ()) -> list[Row] | None:
        """``query``, or None while the server is unreachable."""
        try:
            return self.query(sql, params)
        except psycopg.OperationalError:
            return None

    def rows(self, ids: list[str]) -> dict[str, Row]:
        found = self.query("SELECT * FROM tether_invocations WHERE id = ANY(%s)", [ids])
        return {r["id"]: r for r in found}

    def row(self, invocation_id: str) -> Row:
        return self.rows([invocation_id])[invocation_id]

    def events(self, invocation_id: str) -> list[Row]:
        return self.query(
            "SELECT cursor, type, data, created_at FROM tether_events WHERE invocation_id = %s "
            "ORDER BY cursor",
            [invocation_id],
        )

    def all_match(self, ids: list[str], check: Callable[[Row], bool]) -> bool:
        rows = self.rows(ids)
        return len(rows) == len(ids) and all(check(r) for r in rows.values())


def holding(min_events: int) -> Callable[[Row], bool]:
    """An active attempt that has written at least ``min_events`` events (run.started included)."""
    return lambda r: r["status"] == "active" and r["last_event_id"] >= min_events


def worker_pid(row: Row) -> int:
    """The pid of the worker process named in a row's ``worker`` column (``hostname:pid``)."""
    return int(str(row["worker"]).rsplit(":", 1)[1])


def owner_of(pid: int, procs: Iterable[Proc]) -> Proc:
    """Which of our processes (by process group) ``pid`` belongs to; refuses anything else."""
    group = os.getpgid(pid)
    for proc in procs:
        if proc.pid == group:
            return proc
    raise AssertionError(f"pid {pid} is not one of this test's processes")


def assert_clean_events(events: list[Row]) -> None:
    """Cursors 1..n with no gap or duplicate; exactly one terminal event, the last."""
    cursors = [e["cursor"] for e in events]
    assert cursors == list(range(1, len(events) + 1)), cursors
    terminal = [e for e in events if e["type"] in TERMINAL_EVENTS]
    assert len(terminal) == 1 and events[-1] is terminal[0], [e["type"] for e in events]


def attempts_started(events: list[Row]) -> list[int]:
    return [e["data"]["attempt"] for e in events if e["type"] == "run.started"]


# -- the worker registry (crash detection through the session) ------------------------------


def registry(db: Db) -> dict[str, Row]:
    """``tether_workers`` by worker name, each row with ``holder``: the backend holding its
    liveness lock now (None: nobody)."""
    rows = db.query(
        f"""SELECT w.*, l.pid AS holder FROM tether_workers w
        LEFT JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.classid = {LOCK_NAMESPACE} AND l.objid::bigint = w.lock_id
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
    )
    return {r["name"]: r for r in rows}


def settled(db: Db, count: int, age: float = 1.5) -> bool:
    """``count`` workers alive, each holding its lock, registered ``age`` s ago or more: long
    enough for every scanner to have seen every lock held (a lock gone before anyone saw it is
    left to the heartbeat rule)."""
    rows = db.query(
        "SELECT name FROM tether_workers WHERE state = 'alive' AND lock_id IS NOT NULL "
        "AND started_at < extract(epoch FROM clock_timestamp()) - %s",
        [age],
    )
    held = registry(db)
    return len(rows) == count and all(held[r["name"]]["holder"] for r in rows)


# -- worker processes ------------------------------------------------------------------------


def spawn_worker(cluster: Cluster, processes: int = 1, threads: int = 2) -> Proc:
    """A ``tether worker`` started without waiting for it (``wait_ready`` waits)."""
    return cluster._spawn(
        "worker", ["worker", "--processes", str(processes), "--threads", str(threads)]
    )


def wait_ready(*procs: Proc, timeout: float = 60.0) -> None:
    for proc in procs:
        wait_for(
            lambda p=proc: "Worker process is ready" in p.log() or p.popen.poll() is not None,  # type: ignore[misc]
            timeout,
            "worker boot",
        )
        if proc.popen.poll() is not None:
            raise RuntimeError(f"worker exited:\n{proc.log()}")


def start_workers(cluster: Cluster, count: int, **kw: Any) -> list[Proc]:
    """``count`` separate ``tether worker`` commands (separate process groups), booted together."""
    procs = [spawn_worker(cluster, **kw) for _ in range(count)]
    wait_ready(*procs)
    return procs


def log_has(proc: Proc, text: str) -> bool:
    return text in proc.log()


def process_logged(procs: Iterable[Proc], pid: int, text: str) -> bool:
    """Whether worker process ``pid`` (one of the processes a ``tether worker`` command forks)
    logged a line containing ``text``: worker log lines carry ``[PID n]``."""
    tag = f"[PID {pid}]"
    return any(tag in line and text in line for proc in procs for line in proc.log().splitlines())


def hard_stop(procs: Iterable[Proc]) -> None:
    """Resume anything frozen, then kill every process group at once (teardown)."""
    procs = list(procs)
    for proc in procs:
        proc.signal(signal.SIGCONT)
        proc.signal(signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(10)


# -- a private Redis -------------------------------------------------------------------------


class PrivateRedis:
    """A throwaway ``redis-server`` on a free port, so killing or flushing it disturbs nobody."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not installed")
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with (self.workdir / f"redis-{self.port}.log").open("ab") as log:
            self.popen = subprocess.Popen(
                [
                    self.binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.workdir),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self.ping, 10, "private redis")

    def ping(self) -> bool:
        import redis

        try:
            return bool(redis.Redis.from_url(self.url, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def flushall(self) -> None:
        import redis

        redis.Redis.from_url(self.url).flushall()

    def kill(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)

    def restart(self) -> None:
        """Kill it (no persistence: every message is lost); start an empty one on its port."""
        self.kill()
        self.start()


# -- a private PostgreSQL --------------------------------------------------------------------


def pg_bindir() -> str | None:
    configured = os.environ.get("TETHER_TEST_PG_BIN")
    if configured:
        return configured
    found = shutil.which("pg_ctl")
    if found:
        return str(Path(found).parent)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    return candidates[-1] if candidates else None


class PrivatePostgres:
    """A throwaway PostgreSQL cluster (initdb + pg_ctl) on a free port, run as the postgres user
    when the tests run as root (PostgreSQL refuses root)."""

    def __init__(self) -> None:
        bindir = pg_bindir()
        if bindir is None or not Path(bindir, "initdb").exists():
            raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) were not found")
        self.bindir = bindir
        self.as_user: list[str] = []
        self.dir = Path(tempfile.mkdtemp(prefix="tether-pg-"))
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if runuser is None:
                raise FileNotFoundError("running as root needs runuser to start PostgreSQL")
            import pwd

            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self.as_user = [runuser, "-u", "postgres", "--"]
        self.port = free_port()
        self.data = self.dir / "data"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.as_user, str(Path(self.bindir, tool)), *args],
            check=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=60,
            cwd=self.dir,
        )

    def _pg_ctl(self, *args: str) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "server.log"),
            "-w",
            "-t",
            "30",
            "-o",
            options,
            *args,
        )

    def start(self) -> None:
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        self._pg_ctl("start")

    def stop(self) -> None:
        """Stop at once, disconnecting every session, as a crash or a failover would."""
        self._pg_ctl("-m", "fast", "stop")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def api_for(base: str, request_limit: float = 90.0) -> AsyncIterator[Api]:
    """An API client whose every request gives up after ``request_limit`` seconds."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=request_limit)) as session:
        yield Api(session, base)
