"""A process that outlives the command that started it notices, and stops itself.

``tether worker`` and ``tether gateway --processes N`` start their processes and forward stop
signals to them. Killed with SIGKILL (``kill -9``, the OOM killer) they can do neither, and the
processes would run on unsupervised (taking messages, holding the port) while the supervisor
starts a new command beside them. So each process watches its parent, and once it has been
re-parented (to init or a subreaper) stops as a supervisor would stop it: gracefully
(:func:`tether.worker.parent_watch.stop_gracefully`,
:func:`tether.cli.gateway_processes.stop_orphan`).

The check polls ``os.getppid()`` from a daemon thread every :data:`PARENT_CHECK_INTERVAL`. That
works on every POSIX system, unlike Linux's ``PR_SET_PDEATHSIG`` (which also fires when the
forking *thread* of a live parent ends).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable

PARENT_CHECK_INTERVAL = 0.5
"""Seconds between two looks at the parent: an orphan starts its graceful stop within this."""


class ParentWatch:
    """Calls ``on_orphaned(parent_pid)`` once, from its own thread, when this process's parent
    is no longer ``parent_pid``."""

    def __init__(
        self,
        parent_pid: int,
        on_orphaned: Callable[[int], None],
        interval: float = PARENT_CHECK_INTERVAL,
    ) -> None:
        self.parent_pid = parent_pid
        self._on_orphaned = on_orphaned
        self._interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tether-parent-watch", daemon=True)

    @classmethod
    def of_this_process(cls, on_orphaned: Callable[[int], None]) -> ParentWatch | None:
        """A watch that calls ``on_orphaned`` when this process's parent dies; None in a
        process that multiprocessing did not start (nobody supervises it but its own parent).

        The parent's pid is the one the parent recorded before it forked, so a parent that died
        before the watch began is noticed too."""
        parent = multiprocessing.parent_process()
        if parent is None or parent.pid is None:
            return None
        return cls(parent.pid, on_orphaned)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def join(self, timeout: float) -> bool:
        """Wait for the watch to end (stopped, or the orphan reported); True if it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _watch(self) -> None:
        while True:
            if os.getppid() != self.parent_pid:
                self._on_orphaned(self.parent_pid)
                return
            if self._stopped.wait(self._interval):
                return
