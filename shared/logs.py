"""How Tether's commands write their log: one line per record on stderr, the lines a busy event
loop logs in one of its turns written together.

A busy process logs a few lines per invocation (its attempt starting and ending, the access
line of each request), and with the standard library's handler each line was a write system
call of its own and a ``strftime`` of the same second. :class:`TurnBufferedHandler` writes the
lines an event loop's thread logged at the loop's next turn, together (at most
:data:`MAX_BUFFERED` at a time, in writes a pipe takes whole); any other thread's line, and the
buffered ones before it, go out at once, in the order they were logged. :class:`LineFormatter`
formats a second's time once. At four lines a loop turn (what a no-op invocation logs in
``tether dev``), a line costs 0.82 of the standard handler's and formatter's CPU; at one line a
turn, 1.02–1.06 (``python -m bench logging``).

What a crash can lose: a process killed outright (SIGKILL, the OOM killer) loses the lines of
the loop turn it was in, which it had not written yet; an orderly exit writes them
(``logging.shutdown`` flushes every handler, and so does :func:`flush_logs`, for a process that
leaves through ``os._exit``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import sys
import time
import weakref
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s"
MAX_BUFFERED = 256
"""Lines a loop's turn may buffer before they are written at once."""
ATOMIC_WRITE = select.PIPE_BUF
"""The most bytes one write takes to a pipe whole (4,096 on Linux), never interleaved with
another writer's."""


class LineFormatter(logging.Formatter):
    """:data:`FORMAT`'s lines, the time of day formatted once per second (the milliseconds
    each time), as :class:`logging.Formatter` formats it."""

    def __init__(self, fmt: str = FORMAT) -> None:
        super().__init__(fmt)
        self._uses_time = super().usesTime()
        self._second: tuple[int, str] = (-1, "")

    def usesTime(self) -> bool:  # noqa: N802 (logging's name)
        return self._uses_time

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second, text = self._second
        if int(record.created) != second:  # the local time changes on whole seconds only
            second = int(record.created)
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = (second, text)  # one assignment: another thread reads a whole pair
        return f"{text},{int(record.msecs):03d}"


class TurnBufferedHandler(logging.StreamHandler[TextIO]):
    """A stream handler whose lines logged on an event loop's thread are written at the loop's
    next turn, together; every other line at once, after the buffered ones. ``flush`` writes
    what is buffered."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._scheduled: asyncio.AbstractEventLoop | None = None
        _handlers.add(self)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
            try:
                loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None and self._scheduled is not None and self._scheduled is not loop:
                self._write_buffered()  # lines another loop's thread buffered go out first
            self._lines.append(line)
            if loop is None or len(self._lines) >= MAX_BUFFERED:
                self._write_buffered()
            elif self._scheduled is None:
                loop.call_soon(self._turn_ended, loop)
                self._scheduled = loop
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def flush(self) -> None:
        self.acquire()
        try:
            self._write_buffered()
            if self.stream is not None and hasattr(self.stream, "flush"):
                self.stream.flush()
        finally:
            self.release()

    def _turn_ended(self, loop: asyncio.AbstractEventLoop) -> None:
        self.acquire()
        try:
            if self._scheduled is loop:
                self._write_buffered()
        except Exception:
            self.handleError(logging.makeLogRecord({"msg": "buffered log lines"}))
        finally:
            self.release()

    def _forget_buffered(self) -> None:
        """In a child process just forked: its parent writes the lines it had buffered."""
        self._lines = []
        self._scheduled = None

    def _write_buffered(self) -> None:
        """Write the buffered lines, in as few writes as keep each whole in a shared pipe (the
        handler's lock is held)."""
        self._scheduled = None
        if not self._lines:
            return
        lines, self._lines = self._lines, []
        stream = self.stream
        if stream is None or getattr(stream, "closed", False):
            return
        for text in atomic_writes(lines):
            stream.write(text)
        if hasattr(stream, "flush"):
            stream.flush()


def atomic_writes(lines: list[str]) -> list[str]:
    """``lines`` joined into writes of at most :data:`ATOMIC_WRITE` bytes, none split (a line
    longer than that is a write of its own). Worker processes share one stderr, often a pipe,
    where only a write that size lands whole, never interleaved with another process's."""
    if sum(map(len, lines)) * 4 <= ATOMIC_WRITE:  # no character is more than 4 bytes
        return ["".join(lines)]
    writes: list[str] = []
    chunk: list[str] = []
    size = 0
    for line in lines:
        n = len(line) if line.isascii() else len(line.encode("utf-8", "replace"))
        if chunk and size + n > ATOMIC_WRITE:
            writes.append("".join(chunk))
            chunk, size = [], 0
        chunk.append(line)
        size += n
    if chunk:
        writes.append("".join(chunk))
    return writes


_handlers: weakref.WeakSet[TurnBufferedHandler] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for handler in list(_handlers):
        handler._forget_buffered()


os.register_at_fork(after_in_child=_after_fork_in_child)


def turn_buffered(stream: TextIO, fmt: str = FORMAT) -> TurnBufferedHandler:
    """A :class:`TurnBufferedHandler` on ``stream``, its lines in ``fmt``."""
    handler = TurnBufferedHandler(stream)
    handler.setFormatter(LineFormatter(fmt))
    return handler


def setup_logging(level: str) -> None:
    """Tether's command-line logging: ``level`` and up, to stderr, in :data:`FORMAT`."""
    logging.basicConfig(level=level.upper(), handlers=[turn_buffered(sys.stderr)])


def flush_logs() -> None:
    """Write every buffered line now: for a process about to leave through ``os._exit``, which
    skips ``logging.shutdown``."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stderr, as
            handler.flush()  # logging.shutdown allows
