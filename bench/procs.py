"""Everything a scenario starts: a private PostgreSQL database, a private Dramatiq queue, and
real gateway / worker / ``tether dev`` / baseline subprocesses, each in its own process group.

Every wait is on a condition with a deadline (a port answering, a log line), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.procs import (
    LOOPBACK_PROXY_AUTH,
    Proc,
    cpu_seconds,
    free_port,
    http_ok,
    pids_named,
    wait_for,
)

__all__ = ["Proc", "cpu_seconds", "free_port", "http_ok", "pids_named", "wait_for"]

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get("TETHER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("TETHER_BENCH_REDIS", "redis://127.0.0.1:6379/0")
T = TypeVar("T")


def rss_mb(proc: Proc) -> float:
    """Resident memory (VmRSS) of a process and its descendants now, in MB."""
    total = 0
    for pid in proc.tree():
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def http_answers(url: str) -> bool:
    """Whether ``url`` answers HTTP at all, whatever the status."""
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


@dataclass
class Database:
    """A throwaway PostgreSQL database, migrated, dropped on close."""

    name: str

    @property
    def url(self) -> str:
        """libpq form, for psycopg."""
        return f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{self.name}"

    @property
    def sqlalchemy_url(self) -> str:
        return self.url.replace("postgresql://", "postgresql+psycopg://", 1)

    def backend_pids(self) -> set[int]:
        """PostgreSQL backend processes connected to this database now."""
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.name,)
            ).fetchall()
        return {int(r[0]) for r in rows}

    def vacuum_if_no_autovacuum(self) -> bool:
        """``VACUUM ANALYZE`` this database when the server runs without autovacuum; whether it
        did. Scenarios that send burst after burst to one database call it between rounds, as
        autovacuum would have run by then on a server with it on (PostgreSQL's default): without
        it, statements planned while the tables were small keep their plans as they grow and
        dead rows pile up, so each round runs slower than the one before (docs/operations.md,
        "Vacuum")."""
        import psycopg

        if server_settings()["autovacuum"] == "on":
            return False
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        return True

    def stats(self) -> tuple[int, int]:
        """(xact_commit, xact_rollback) of this database, as pg_stat_database reports them."""
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            row = conn.execute(
                "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = %s",
                (self.name,),
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


@functools.cache
def server_settings() -> dict[str, str]:
    """The bench's PostgreSQL server: its version, and whether autovacuum runs (asked once);
    empty strings when it cannot be reached."""
    import psycopg

    names = ("server_version", "autovacuum")
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            rows = {name: conn.execute(f"SHOW {name}").fetchone() for name in names}
    except psycopg.Error:
        return dict.fromkeys(names, "")
    return {name: str(row[0]) if row else "" for name, row in rows.items()}


@contextlib.contextmanager
def private_database(migrate: bool = True) -> Iterator[Database]:
    import psycopg

    db = Database(f"tether_bench_{uuid.uuid4().hex[:10]}")
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db.name}"')
    try:
        if migrate:  # on a thread of its own: the caller may be inside an event loop
            with ThreadPoolExecutor(1) as pool:
                pool.submit(asyncio.run, _migrate(db.sqlalchemy_url)).result()
        yield db
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')


async def _migrate(url: str) -> None:
    from tether.store.store import Store

    store = Store.postgres(url, pool_size=1)
    try:
        await store.migrate()
    finally:
        await store.close()


def new_queue() -> str:
    return f"tether-bench-{uuid.uuid4().hex[:8]}"


def drop_queue(queue: str) -> None:
    """Delete every Dramatiq key of a private queue (queue, delay queue, message hashes, acks)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = [*client.scan_iter(match=f"dramatiq:{queue}*", count=1000)]
        keys += [*client.scan_iter(match=f"dramatiq:__acks__.*.{queue}*", count=1000)]
        if keys:
            client.delete(*keys)
    finally:
        client.close()


# -- processes -----------------------------------------------------------------------------


def redis_commands() -> int:
    """Commands the Redis server has processed since it started (all clients)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        return int(client.info("stats")["total_commands_processed"])
    finally:
        client.close()


@dataclass
class Launcher:
    """Starts processes against one database and queue; ``stop_all`` ends every one of them."""

    db: Database
    queue: str = field(default_factory=new_queue)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tether-bench-")))
    env_overrides: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    keep_logs: str = ""
    """Why the logs are worth keeping after a clean run (a scenario saw something odd)."""
    python: str = sys.executable
    """The interpreter of Tether's processes: another install's runs another version of the
    code (``bench.versus``); the bench's own, the peer and the baselines always use this one's."""

    def env(self, app: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        env.update(
            TETHER_DATABASE_URL=self.db.sqlalchemy_url,
            TETHER_REDIS_URL=REDIS_URL,
            TETHER_APP=app,
            TETHER_WORKER__QUEUE=self.queue,
            TETHER_TIMERS__SHUTDOWN_GRACE="2",
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
        )
        env.update(LOOPBACK_PROXY_AUTH)  # bench/load.py sends X-Forwarded-User per owner
        env.update(self.env_overrides)
        env.update(extra or {})
        return env

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        log_path = self.workdir / f"{name}-{len(self.procs)}.log"
        with log_path.open("wb") as handle:
            popen = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def _wait_http(self, proc: Proc, base: str) -> str:
        wait_for(
            lambda: http_ok(f"{base}/healthz") or not proc.alive(), 60, f"{proc.name} to answer"
        )
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.log()[-3000:]}")
        return base

    def _wait_answers(self, proc: Proc, base: str) -> str:
        """Wait until ``base`` answers HTTP at all (AgentKit's server has no health route)."""
        probe = f"{base}/api/invocations/{uuid.uuid4()}"
        wait_for(lambda: http_answers(probe) or not proc.alive(), 60, f"{proc.name} to answer")
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.log()[-3000:]}")
        return base

    def _wait_workers(self, proc: Proc, processes: int) -> Proc:
        wait_for(
            lambda: proc.log().count("Worker process is ready") >= processes or not proc.alive(),
            90,
            f"{proc.name} to boot",
        )
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.log()[-3000:]}")
        return proc

    def gateway(
        self, app: str, processes: int = 1, extra: dict[str, str] | None = None
    ) -> tuple[Proc, str]:
        port = free_port()
        argv = [
            self.python,
            "-m",
            "tether.cli",
            "gateway",
            "--port",
            str(port),
            "--processes",
            str(processes),
        ]
        proc = self.spawn("gateway", argv, self.env(app, extra))
        return proc, self._wait_http(proc, f"http://127.0.0.1:{port}")

    def worker(
        self, app: str, processes: int = 1, threads: int = 4, extra: dict[str, str] | None = None
    ) -> Proc:
        argv = [
            self.python,
            "-m",
            "tether.cli",
            "worker",
            "--processes",
            str(processes),
            "--threads",
            str(threads),
        ]
        proc = self.spawn("worker", argv, self.env(app, extra))
        return self._wait_workers(proc, processes)

    def dev(
        self, app: str, extra: dict[str, str] | None = None, db: str = ":memory:"
    ) -> tuple[Proc, str]:
        """``tether dev`` on an in-memory store, or on ``db``: ``"file"`` for a SQLite file in
        this launcher's working directory (what ``tether dev`` uses by default)."""
        port = free_port()
        path = str(self.workdir / "tether.db") if db == "file" else db
        argv = [self.python, "-m", "tether.cli", "dev", "--port", str(port), "--db", path]
        proc = self.spawn("dev", argv, self.env(app, extra))
        return proc, self._wait_http(proc, f"http://127.0.0.1:{port}")

    def peer(self, store: str) -> tuple[Proc, str]:
        """AgentKit's DurableAgentServer (bench/peer_app.py) on its ``memory`` or ``postgres``
        store; the latter in this launcher's private database, in a schema of its own."""
        port = free_port()
        argv = [sys.executable, "-m", "bench.peer_app", "--port", str(port), "--store", store]
        if store == "postgres":
            argv += ["--database", self.db.url]
        proc = self.spawn(f"agentkit-{store}", argv, self.env("bench.apps:both"))
        return proc, self._wait_answers(proc, f"http://127.0.0.1:{port}")

    def bare_gateway(self, processes: int = 1) -> tuple[Proc, str]:
        """The baseline accept handler (bench/baselines.py)."""
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "bench.baselines",
            "--port",
            str(port),
            "--processes",
            str(processes),
            "--database",
            self.db.url,
            "--redis",
            REDIS_URL,
            "--queue",
            self.queue,
        ]
        proc = self.spawn("bare-gateway", argv, self.env("bench.apps:noop"))
        return proc, self._wait_http(proc, f"http://127.0.0.1:{port}")

    def bare_worker(self, processes: int = 1, threads: int = 4, poll_timeout_ms: int = 100) -> Proc:
        """Dramatiq alone, with the same middleware, processes, threads and poll timeout."""
        env = self.env("bench.apps:noop")
        env.update(dramatiq_worker_timeout=str(poll_timeout_ms), TETHER_BENCH_QUEUE=self.queue)
        argv = [
            sys.executable,
            "-m",
            "dramatiq",
            "bench.bare_worker",
            "--processes",
            str(processes),
            "--threads",
            str(threads),
            "--queues",
            self.queue,
        ]
        proc = self.spawn("bare-worker", argv, env)
        return self._wait_workers(proc, processes)

    def stop(self, proc: Proc) -> None:
        proc.stop()
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()
        drop_queue(self.queue)


@contextlib.contextmanager
def launcher(db: Database, **kwargs: Any) -> Iterator[Launcher]:
    """A :class:`Launcher`; its processes' logs are deleted after a clean exit, kept otherwise."""
    launch = Launcher(db, **kwargs)
    try:
        yield launch
    except BaseException:
        launch.stop_all()
        print(f"[bench] process logs kept in {launch.workdir}", file=sys.stderr)
        raise
    launch.stop_all()
    if launch.keep_logs:
        print(f"[bench] process logs kept in {launch.workdir}: {launch.keep_logs}", file=sys.stderr)
    else:
        shutil.rmtree(launch.workdir, ignore_errors=True)
