"""A worker process that outlives ``tether worker`` stops itself.

``tether worker`` is Dramatiq's main process: it starts the worker processes and forwards stop
signals to them (they write their output to the stderr they inherited, not through Dramatiq's
relay: :func:`write_output_to_own_stderr`). Killed with SIGKILL (``kill -9``, the OOM killer)
it can do neither, and its worker processes would run on unsupervised, taking messages, while
the supervisor starts a new ``tether worker`` beside them. So each worker process watches its
parent. Once it has been re-parented (to init or a subreaper), it makes sure its output does
not go to the relay pipe, which nobody reads any more, and sends itself SIGTERM: the graceful
stop a supervisor would send. It stops taking messages, lets running attempts finish
for ``timers.shutdown_grace``, hands the rest back for recovery, and exits.

The watch itself is :class:`tether.parent_watch.ParentWatch`; :func:`stop_gracefully` is what
a worker process does when it fires.

:func:`first_of_its_command` says which of a ``tether worker``'s processes is its first, the one
that says once what the command should say once.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys

from dramatiq.cli import LOGFORMAT as DRAMATIQ_LOG_FORMAT

from tether.logs import TurnBufferedHandler, turn_buffered

log = logging.getLogger(__name__)

FIRST_WORKER_PROCESS = "Process-1"
"""The name multiprocessing gives the first process ``tether worker`` (Dramatiq's main process)
starts: it starts its worker processes first, in order, so they are ``Process-1`` to
``Process-N``."""


def first_of_its_command() -> bool:
    """Whether this process says what a ``tether worker`` command should say once, not once per
    worker process (``--processes N``): the first worker process does, and so does a process
    that multiprocessing did not start (``tether dev``, a test)."""
    if multiprocessing.parent_process() is None:
        return True
    return multiprocessing.current_process().name == FIRST_WORKER_PROCESS


def stop_gracefully(parent_pid: int) -> None:
    """The parent is gone: write to this process's own stderr, then stop as on SIGTERM."""
    write_output_to_own_stderr()
    log.warning(
        "worker process %d: its parent (pid %d, tether worker) is gone; stopping gracefully",
        os.getpid(),
        parent_pid,
    )
    os.kill(os.getpid(), signal.SIGTERM)


def write_output_to_own_stderr() -> None:
    """Point ``sys.stdout``, ``sys.stderr`` and the log handlers writing to them at the
    process's own stderr (the one it inherited: where ``tether worker`` writes; ``print``
    output too, as through the relay, and line-buffered like it).

    Dramatiq points them at a pipe its main process reads and copies to its stderr, a line at
    a time: every log line cost a pipe write here and a read, a write and a flush there (the
    two log lines of each invocation were 7 % of a busy worker process's CPU, three quarters
    of it the pipe). A worker process calls this as it boots, and again as an orphan: once its
    parent is dead nobody reads that pipe, and when its buffer filled a write would block
    forever (sibling processes hold its read end open)."""
    own = sys.__stderr__
    if own is None:
        return
    relayed = {id(sys.stdout), id(sys.stderr)}
    root = logging.getLogger()
    for handler in list(root.handlers):
        if not isinstance(handler, logging.StreamHandler) or id(handler.stream) not in relayed:
            continue
        if isinstance(handler, TurnBufferedHandler):
            handler.setStream(own)
        else:  # Dramatiq's, in its format: written a loop turn's lines at a time from now on
            root.removeHandler(handler)
            handler.close()
            replacement = turn_buffered(own, DRAMATIQ_LOG_FORMAT)
            replacement.setLevel(handler.level)
            root.addHandler(replacement)
    sys.stdout = own  # where the relay put it: stderr, a line at a time
    sys.stderr = own
