"""The embedded store's WAL checkpoints, on a thread of their own instead of inside a commit.

SQLite copies the WAL back into the database file (a checkpoint) from inside the ``COMMIT`` that
takes the WAL past 1,000 pages, and with ``synchronous=NORMAL`` that checkpoint syncs the WAL
and then the database file to disk. The embedded store's writer commits on the event loop's
thread, so the loop waited for those syncs: under a burst of 2,000 background no-ops (a slow
two-core machine), 57 of 2,169 commits took over a millisecond, up to 32 ms, and held the loop
for 627 of the 1,023 ms it spent committing; the rest took 0.18 ms at the median.

So the writer's connections turn automatic checkpoints off (``PRAGMA wal_autocheckpoint=0``),
and :class:`Checkpoints` runs a ``PASSIVE`` checkpoint on a thread and a connection of its own
after every :data:`EVERY_COMMITS` commits; ``sqlite3`` releases the GIL while SQLite works, so
the loop serves on meanwhile.

What this asks, and why it holds:

- **The WAL stays bounded.** SQLite writes the WAL from its start again only when a writer
  begins and finds every frame copied back. A checkpoint inside the writer's commit ensured
  that; one beside it does not, since the loop commits on while it runs, so under steady
  writes the WAL would grow for as long as they last. When a ``PASSIVE`` checkpoint reports
  more than :data:`RESTART_FRAMES` frames in the WAL, the writer's pool holds its own writes
  back (its one connection stays lent, the loop serves everything else) while the thread runs
  a ``RESTART`` one: it copies what is left, syncs, and waits (at most
  :data:`RESTART_WAIT_S`) for the readers still on the old frames, so the next write starts
  the WAL over. Run beside the loop's writes, it could wait for the write lock for as long as
  they kept coming. A reader's long snapshot holds the WAL back, as it did with automatic
  checkpoints.
- **Every writer of the store checkpoints this way**, each with its own count (the loop's
  store, the heartbeat thread's, another process's); migrations keep automatic checkpoints,
  and the last connection to close the file checkpoints what is left, as before.
- **Durability is unchanged.** A committed transaction is in the WAL when ``COMMIT`` returns,
  whoever checkpoints it later; a process that dies loses nothing it committed, and (as with
  ``synchronous=NORMAL`` before) a power loss may lose the last transactions not yet synced.
- **A checkpoint never fails a write.** A failed one is logged (its class, not its text) and
  the next one tries again; a commit after the store closed (or during the interpreter's
  exit) starts none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager

log = logging.getLogger(__name__)

EVERY_COMMITS = 64
"""Commits between checkpoints: under a burst the writer's commits dirty ~10-20 pages each, so
about as often as SQLite's own 1,000-page threshold."""
RESTART_FRAMES = 4096
"""WAL frames (pages; 16 MiB at SQLite's default 4 KiB) past which a checkpoint restarts it."""
RESTART_WAIT_S = 0.25
"""How long a restarting checkpoint waits for the readers on old frames (the writer's own writes
held back meanwhile) before it gives up until the next ``PASSIVE`` one finds the WAL long."""
NO_AUTOCHECKPOINT = "PRAGMA wal_autocheckpoint=0"
"""For the connections whose commits :class:`Checkpoints` follows."""


class Checkpoints:
    """``PASSIVE`` checkpoints of the SQLite file at ``path``, on a thread of their own, after
    every :data:`EVERY_COMMITS` calls of :meth:`committed` (the loop's writer calls it), and a
    ``RESTART`` one when the WAL has grown past :data:`RESTART_FRAMES`."""

    def __init__(
        self, path: str, every: int = EVERY_COMMITS, restart_frames: int = RESTART_FRAMES
    ) -> None:
        self._path = path
        self._every = every
        self._restart_frames = restart_frames
        self._commits = 0
        self._running: Future[None] | None = None
        """The checkpoint submitted last."""
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="tether-checkpoints")
        self._conn: sqlite3.Connection | None = None
        """Opened, used and closed on the executor's thread only."""
        self._restart_due = False
        """Set on the executor's thread: the last checkpoint left the WAL past the limit."""
        self._restarting = False
        self._closed = False

    def committed(self) -> bool:
        """One more commit; a ``PASSIVE`` checkpoint starts once enough have come and none is
        running. True: the WAL is due to start over, and the caller is to await
        :meth:`restart` while no transaction of its own holds the write lock."""
        self._commits += 1
        if self._closed:
            return False
        if self._restart_due and not self._restarting:
            self._restart_due = False  # the next PASSIVE checkpoint decides again
            self._restarting = True
            return True
        if self._commits < self._every or not self._idle():
            return False
        self._commits = 0
        self._submit(self._checkpoint)
        return False

    async def restart(self, writes_held: Callable[[], AbstractAsyncContextManager[None]]) -> None:
        """Within ``writes_held`` (the caller's own writes held back), a ``RESTART`` checkpoint
        on the thread: it copies what is left, waits (at most :data:`RESTART_WAIT_S`) for the
        readers on old frames, and the next write starts the WAL over."""
        try:
            async with writes_held():
                future = self._submit(self._restart)
                if future is not None:
                    await asyncio.wrap_future(future)
        finally:
            self._restarting = False

    def close(self) -> None:
        """Wait for a running checkpoint, then close its connection."""
        if not self._closed:
            self._closed = True
            if self._running is not None:  # else no thread was started, no connection opened
                self._executor.submit(self._close)
        self._executor.shutdown(wait=True)

    def _idle(self) -> bool:
        return self._running is None or self._running.done()

    def _submit(self, checkpoint: Callable[[], None]) -> Future[None] | None:
        try:
            self._running = self._executor.submit(checkpoint)
        except RuntimeError:  # the interpreter is exiting: the last close checkpoints
            self._closed = True
            return None
        return self._running

    def _checkpoint(self) -> None:
        with self._logged():
            _, frames, _ = self._connection().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            self._restart_due = frames > self._restart_frames

    def _restart(self) -> None:
        with self._logged():
            # busy: a reader stayed on old frames past the wait; the next PASSIVE one tells
            self._connection().execute("PRAGMA wal_checkpoint(RESTART)").fetchall()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = sqlite3.connect(self._path, timeout=RESTART_WAIT_S, isolation_level=None)
        return self._conn

    @contextlib.contextmanager
    def _logged(self) -> Iterator[None]:
        try:
            yield
        except Exception as exc:  # another checkpoint running, the file gone: next time
            log.info("checkpoint of the embedded store skipped (%s)", type(exc).__name__)
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()
