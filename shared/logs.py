"""How Tether's commands write their log: one line per record on stderr, the lines a busy event
loop logs in one of its turns written together.

A busy process logs a few lines per invocation (its attempt starting and ending, the access
line of each request), and with the standard library's handler each line was a write system
call of its own and a ``strftime`` of the same second. :class:`TurnBufferedHandler` writes the
lines an event loop's thread logged at the loop's next turn, together (at most
:data:`MAX_BUFFERED` at a time, in writes a pipe takes whole); any other thread's line, and the
buffered ones before it, go out at once, in the order they were logged; lines whose loop does
not turn for :data:`STALLED_AFTER` (a handler blocking it) are written by a thread of this
module. :class:`LineFormatter` formats a second's time once. At four lines a loop turn (what a
no-op invocation logs in ``tether dev``), a line costs 0.82 of the standard handler's and
formatter's CPU; at one line a turn, 1.02–1.06 (``python -m bench logging``).

The lines logged for every request and every attempt (the access line, an attempt starting and
ending) go through :func:`log_line`: where the standard call would give the line to this
handler alone, it formats and buffers the line itself, without a :class:`logging.LogRecord`
(the caller's frame looked up, the record built, the filters and handlers called in turn),
exactly as the handler would have written it. That was ~30 us of a gateway's CPU per request
(``TETHER_ACCESS_LOG=false`` beside the default, a status read costing 1.12x with the line);
anywhere else (another handler, a filter, a record factory, a logger class or a ``Logger``
method of someone else's, a format with other fields) the call is the standard one, and so is
a line whose arguments do not format; a write that fails is reported as a record's is.

What a crash can lose: a process killed outright (SIGKILL, the OOM killer) loses the lines of
the loop turn it was in, which it had not written yet (at most 1.5 × :data:`STALLED_AFTER` old:
the thread looks every half of it); an orderly exit writes them (``logging.shutdown`` flushes
every handler, and so does :func:`flush_logs`, for a process that leaves through ``os._exit``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import select
import sys
import threading
import time
import weakref
from typing import Any, TextIO

FORMAT = "%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s"
MAX_BUFFERED = 256
"""Lines a loop's turn may buffer before they are written at once."""
STALLED_AFTER = 0.2
"""Seconds a loop's buffered lines wait for its next turn at most: past that (a handler blocking
the loop with CPU work or ``time.sleep``) a thread of this module writes them, so the line that
names what blocks the loop is not held back for as long as it blocks."""
ATOMIC_WRITE = select.PIPE_BUF
"""The most bytes one write takes to a pipe whole (4,096 on Linux), never interleaved with
another writer's."""


CONTINUATION = "  "  # begins every line of a record after its first
_MOVES = re.compile("[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]")  # all but tab and \n


def fenced(text: str) -> str:
    """A formatted record whose every line after the first begins with :data:`CONTINUATION`,
    and whose other characters that move a terminal's cursor or break a line for some reader
    (a carriage return, an escape, U+2028) are written as escapes (``\\r``, ``\\x1b``): text
    from outside (a handler's exception message quoting its input) cannot begin a line that
    reads as a record of its own, with a time and a level."""
    if _MOVES.search(text) is not None:
        text = _MOVES.sub(lambda m: repr(m.group())[1:-1], text)
    return text.replace("\n", "\n" + CONTINUATION) if "\n" in text else text


DIRECT_FIELDS = frozenset({"asctime", "levelname", "process", "name", "message", "threadName"})
"""The record's fields a format may use for :func:`log_line` to write its lines directly."""
_FIELD = re.compile(r"%\((\w+)\)")


class LineFormatter(logging.Formatter):
    """:data:`FORMAT`'s lines, the time of day formatted once per second (the milliseconds
    each time), as :class:`logging.Formatter` formats it. :meth:`line` formats a line without
    a record, where the format uses only :data:`DIRECT_FIELDS`."""

    def __init__(self, fmt: str = FORMAT) -> None:
        super().__init__(fmt)
        self._uses_time = super().usesTime()
        self._second: tuple[int, str] = (-1, "")
        fields = set(_FIELD.findall(fmt))
        self.direct = fields <= DIRECT_FIELDS
        """Whether :meth:`line` can format this format's lines."""
        self._thread_named = "threadName" in fields

    def usesTime(self) -> bool:  # noqa: N802 (logging's name)
        return self._uses_time

    def format(self, record: logging.LogRecord) -> str:
        return fenced(super().format(record))

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        return self._time_text(record.created, record.msecs)

    def _time_text(self, created: float, msecs: float) -> str:
        second, text = self._second
        if int(created) != second:  # the local time changes on whole seconds only
            second = int(created)
            text = time.strftime(self.default_time_format, self.converter(created))
            self._second = (second, text)  # one assignment: another thread reads a whole pair
        return f"{text},{int(msecs):03d}"

    def line(self, name: str, level: int, message: str) -> str:
        """What :meth:`format` gives for a record of ``name``'s logged now on this thread at
        ``level`` with ``message`` (no exception, no stack), when :attr:`direct` and no
        ``datefmt``."""
        now = time.time()  # and its milliseconds, as Python 3.11's LogRecord takes them
        values: dict[str, object] = {
            "asctime": self._time_text(now, int((now - int(now)) * 1000)),
            "levelname": logging.getLevelName(level),
            "process": os.getpid(),
            "name": name,
            "message": message,
        }
        if self._thread_named:
            values["threadName"] = threading.current_thread().name
        return fenced(self._fmt % values if self._fmt is not None else message)


class TurnBufferedHandler(logging.StreamHandler[TextIO]):
    """A stream handler whose lines logged on an event loop's thread are written at the loop's
    next turn, together; every other line at once, after the buffered ones. ``flush`` writes
    what is buffered."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._scheduled: asyncio.AbstractEventLoop | None = None
        self._since = 0.0
        """When the buffered lines were scheduled for the next turn (``time.monotonic``)."""
        _handlers.add(self)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._add(self.format(record) + self.terminator)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def direct_formatter(self, level: int) -> LineFormatter | None:
        """The formatter :func:`log_line` formats this handler's lines with, when it may: no
        filter, ``level`` passes, and the formatter can (:attr:`LineFormatter.direct`)."""
        formatter = self.formatter
        if (
            self.filters
            or level < self.level
            or type(formatter) is not LineFormatter
            or not formatter.direct
            or formatter.datefmt is not None
        ):
            return None
        return formatter

    def add_line(self, line: str) -> None:
        """Buffer a formatted line (:func:`log_line`), as :meth:`emit` does a record's: a
        write that fails (a closed or broken stream) is reported, never raised."""
        self.acquire()
        try:
            self._add(line + self.terminator)
        except RecursionError:
            raise
        except Exception:
            self.handleError(logging.makeLogRecord({"msg": line}))
        finally:
            self.release()

    def _add(self, line: str) -> None:
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
            self._since = time.monotonic()
            pending = _pending if _pending is not None else _stall_watch()
            if not pending.is_set():  # a lock and a notify otherwise: once per watch is enough
                pending.set()

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

    def write_stalled(self, now: float) -> bool:
        """Write the buffered lines if their loop has not turned for :data:`STALLED_AFTER`;
        whether lines are still waiting for a turn."""
        if self._scheduled is None:
            return False
        if now - self._since < STALLED_AFTER:
            return True
        self.acquire()
        try:
            if self._scheduled is not None and now - self._since >= STALLED_AFTER:
                self._write_buffered()
        except Exception:
            self.handleError(logging.makeLogRecord({"msg": "buffered log lines"}))
        finally:
            self.release()
        return False

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
_pending: threading.Event | None = None
"""Set when a loop buffers lines; its thread (started with it) writes those a blocked loop
holds (:data:`STALLED_AFTER`)."""
_starting = threading.Lock()


def _stall_watch() -> threading.Event:
    global _pending
    if _pending is None:
        with _starting:
            if _pending is None:
                pending = threading.Event()
                threading.Thread(
                    target=_write_stalled, args=(pending,), name="tether-log-stalls", daemon=True
                ).start()
                _pending = pending
    return _pending


def _write_stalled(pending: threading.Event) -> None:
    while True:
        pending.wait()
        pending.clear()
        waiting = True
        while waiting:  # until every loop turned (or was written for)
            time.sleep(STALLED_AFTER / 2)
            now = time.monotonic()
            waiting = False
            for handler in list(_handlers):
                waiting = handler.write_stalled(now) or waiting


def _after_fork_in_child() -> None:
    global _pending, _starting
    _pending, _starting = None, threading.Lock()  # no thread of the parent's runs here
    for handler in list(_handlers):
        handler._forget_buffered()


os.register_at_fork(after_in_child=_after_fork_in_child)


def log_line(
    logger: logging.Logger, level: int, msg: str, *args: object, stacklevel: int = 1
) -> None:
    """``logger.log(level, msg, *args, stacklevel=stacklevel)`` (positional ``args`` only), the
    line formatted and buffered directly where that call would give it to one
    :class:`TurnBufferedHandler` alone (module doc); the same line either way."""
    if not logger.isEnabledFor(level):
        return
    handler = _sole_handler(logger)
    formatter = handler.direct_formatter(level) if handler is not None else None
    line = None
    if handler is not None and formatter is not None:
        try:
            line = formatter.line(logger.name, level, msg % args if args else msg)
        except RecursionError:
            raise
        except Exception:  # an argument that does not format: the standard call reports it
            line = None
    if handler is None or line is None:
        logger.log(level, msg, *args, stacklevel=stacklevel + 1)  # the record names our caller
        return
    handler.add_line(line)


class DirectInfo(logging.LoggerAdapter[logging.Logger]):
    """A module's logger whose ``info`` lines go through :func:`log_line`: for the modules that
    log a line or two per request or attempt. Everything else is the logger's own."""

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        if kwargs or not isinstance(msg, str):
            kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
            self.logger.info(msg, *args, **kwargs)
        else:
            log_line(self.logger, logging.INFO, msg, *args, stacklevel=2)


_LOGGER_METHODS = tuple(
    (name, getattr(logging.Logger, name)) for name in ("makeRecord", "handle", "callHandlers")
)
_PLAIN_LOGGERS = (logging.Logger, logging.RootLogger)


def _sole_handler(logger: logging.Logger) -> TurnBufferedHandler | None:
    """The one handler a record of ``logger``'s would reach, if it is a
    :class:`TurnBufferedHandler` and nothing on the way could change or drop the record (a
    filter, a disabled logger, a logger class or method of someone else's, a record factory,
    records without process or thread)."""
    if (
        logging.getLogRecordFactory() is not logging.LogRecord
        or not logging.logProcesses
        or not logging.logThreads
        or any(getattr(logging.Logger, name) is not kept for name, kept in _LOGGER_METHODS)
    ):  # a record factory, or logging's own methods patched (as error trackers hook in)
        return None
    found: TurnBufferedHandler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters or current.disabled or type(current) not in _PLAIN_LOGGERS:
            return None
        for handler in current.handlers:
            if found is not None or type(handler) is not TurnBufferedHandler:
                return None
            found = handler
        if not current.propagate:
            break
        current = current.parent
    return found


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
