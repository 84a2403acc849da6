"""``tether gateway --processes N``: N forked processes serving one listening socket, under the
command's own process, which forwards SIGTERM and SIGINT to them and waits for them; when one
exits on its own, it stops the others and exits too, for its supervisor to restart.

A gateway process whose parent is gone (``kill -9`` of ``tether gateway``, the OOM killer)
stops as on SIGTERM, as a worker process does (:mod:`tether.parent_watch`): otherwise
it served on unsupervised, holding the port, and the supervisor's next ``tether gateway``
could not bind it ("Address already in use").
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable

from aiohttp import web

from tether.cli.serving import LISTEN_BACKLOG, serve
from tether.logs import flush_logs
from tether.parent_watch import ParentWatch
from tether.settings import Settings

log = logging.getLogger("tether")


def serve_processes(
    settings: Settings, make_app: Callable[[], web.Application], processes: int
) -> int:
    """Fork ``processes`` gateway processes on one socket; the exit status of the first that
    failed, else 0."""
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    parent = os.getpid()
    children = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            ParentWatch(parent, stop_orphan).start()
            serve(make_app(), settings, sock=sock)
            flush_logs()  # os._exit skips logging.shutdown
            os._exit(0)
        children.append(pid)
    port = sock.getsockname()[1]  # the one the system chose for --port 0
    log.info("gateway on %s:%d with %d processes", settings.host, port, processes)
    return wait_children(children)


def stop_orphan(parent_pid: int) -> None:
    """This gateway process's parent is gone: stop as on SIGTERM (streams are told to
    reconnect, sync callers get their 202)."""
    log.warning(
        "gateway process %d: its parent (pid %d, tether gateway) is gone; stopping gracefully",
        os.getpid(),
        parent_pid,
    )
    os.kill(os.getpid(), signal.SIGTERM)


def wait_children(children: list[int]) -> int:
    """Wait for every gateway process; forward SIGTERM and SIGINT to them. One that exits on
    its own (a crash, the OOM killer) stops the others, as a Dramatiq worker process does its
    siblings, so the command exits for its supervisor to restart rather than serve on with
    fewer processes than it was given. The status is the first non-zero one."""
    running = set(children)
    stopping = False

    def stop(signum: int) -> None:
        nonlocal stopping
        stopping = True
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    signal.signal(signal.SIGTERM, lambda signum, _frame: stop(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: stop(signum))
    status = 0
    while running:
        pid, code = os.wait()
        if pid not in running:
            continue
        running.discard(pid)
        exit_code = os.waitstatus_to_exitcode(code)  # -N: killed by signal N
        status = status or (exit_code if exit_code > 0 else 1 if exit_code < 0 else 0)
        if not stopping:  # one ended on its own, even cleanly: the command fails
            log.warning(
                "gateway process %d exited (status %d): stopping the others", pid, exit_code
            )
            status = status or 1
            stop(signal.SIGTERM)
    return status
