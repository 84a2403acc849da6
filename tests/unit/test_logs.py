"""The commands' log handler writes a loop turn's lines together and loses none, in order; its
formatter writes exactly what the standard one would."""

from __future__ import annotations

import asyncio
import io
import logging
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tether.logs import (
    ATOMIC_WRITE,
    FORMAT,
    MAX_BUFFERED,
    LineFormatter,
    TurnBufferedHandler,
    atomic_writes,
)


class CountingStream(io.StringIO):
    """A stream that counts its writes (each a system call on a real stderr)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.fixture
def logger() -> tuple[logging.Logger, TurnBufferedHandler, CountingStream]:
    stream = CountingStream()
    handler = TurnBufferedHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger(f"tether.test_logs.{id(stream)}")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    return log, handler, stream


def test_a_loop_turns_lines_are_written_together_at_the_next_turn(
    logger: tuple[logging.Logger, TurnBufferedHandler, CountingStream],
) -> None:
    log, _, stream = logger

    async def main() -> tuple[str, str]:
        for i in range(5):
            log.info("line %d", i)
        during = stream.getvalue()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return during, stream.getvalue()

    during, after = asyncio.run(main())
    assert during == ""  # nothing written within the turn that logged
    assert after == "".join(f"line {i}\n" for i in range(5))
    assert stream.writes == 1


def test_a_line_from_a_thread_without_a_loop_goes_out_after_the_buffered_ones(
    logger: tuple[logging.Logger, TurnBufferedHandler, CountingStream],
) -> None:
    log, _, stream = logger

    async def main() -> str:
        log.info("first, on the loop")
        thread = threading.Thread(target=log.info, args=("second, from a thread",))
        thread.start()
        thread.join()
        return stream.getvalue()

    assert asyncio.run(main()) == "first, on the loop\nsecond, from a thread\n"


def log_as_a_loop_stops(log: logging.Logger, message: str) -> None:
    """Log ``message`` on a loop's thread in the turn that stops the loop, then close it: the
    write the handler scheduled for its next turn never runs."""
    loop = asyncio.new_event_loop()

    async def log_and_stop() -> None:
        log.info(message)
        loop.stop()

    loop.create_task(log_and_stop())
    loop.run_forever()
    loop.close()


def test_lines_a_stopped_loop_left_go_out_with_the_next_loops(
    logger: tuple[logging.Logger, TurnBufferedHandler, CountingStream],
) -> None:
    log, _, stream = logger
    log_as_a_loop_stops(log, "one, as the first loop stopped")

    async def second() -> None:
        log.info("two, on a second loop")
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(second())
    assert stream.getvalue() == "one, as the first loop stopped\ntwo, on a second loop\n"


def test_flush_writes_what_a_loop_buffered_even_if_the_loop_never_turns_again(
    logger: tuple[logging.Logger, TurnBufferedHandler, CountingStream],
) -> None:
    log, handler, stream = logger
    log_as_a_loop_stops(log, "the last line before the loop stopped")
    assert stream.getvalue() == ""
    handler.flush()  # what logging.shutdown and tether.logs.flush_logs do
    assert stream.getvalue() == "the last line before the loop stopped\n"


def test_a_loop_blocked_by_a_handler_does_not_hold_its_lines_back(
    logger: tuple[logging.Logger, TurnBufferedHandler, CountingStream],
) -> None:
    """A handler that blocks the loop (CPU work, ``time.sleep``) right after its attempt's
    "started" line: that line, the one naming the culprit, must not wait for the loop's next
    turn (which may never come before the process is killed)."""
    log, _, stream = logger

    async def main() -> str:
        log.info("invocation x: attempt 1 started")
        deadline = time.monotonic() + 5
        while not stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)  # noqa: ASYNC251 (the loop is blocked on purpose)
        return stream.getvalue()

    assert asyncio.run(main()) == "invocation x: attempt 1 started\n"


def test_a_full_buffer_is_written_within_the_turn(
    logger: tuple[logging.Logger, TurnBufferedHandler, CountingStream],
) -> None:
    log, _, stream = logger

    async def main() -> str:
        for i in range(MAX_BUFFERED):
            log.info("%d", i)
        return stream.getvalue()

    assert asyncio.run(main()).count("\n") == MAX_BUFFERED


def test_a_turns_lines_go_out_in_writes_a_pipe_takes_whole_none_split() -> None:
    line = "x" * 1000 + "\n"
    wide = "é" * 1500 + "\n"  # 3,001 bytes in UTF-8, 1,501 characters
    long = "y" * (ATOMIC_WRITE + 10) + "\n"
    lines = [line] * 9 + [wide, wide, long, line]
    writes = atomic_writes(lines)
    assert "".join(writes) == "".join(lines)
    assert all(w.endswith("\n") for w in writes)  # no line split between two writes
    assert all(len(w.encode()) <= ATOMIC_WRITE for w in writes if w != long)
    assert [w.count("\n") for w in writes] == [4, 4, 2, 1, 1, 1]  # the wide lines by bytes


def test_a_forked_child_does_not_write_its_parents_buffered_lines(tmp_path: Path) -> None:
    out = tmp_path / "log.txt"
    script = textwrap.dedent(
        f"""
        import asyncio, logging, os
        from tether.logs import turn_buffered
        stream = open({str(out)!r}, "w")
        logging.basicConfig(level="INFO", handlers=[turn_buffered(stream, "%(message)s")])

        async def main():
            logging.getLogger("x").info("buffered in the parent")
            pid = os.fork()
            if pid == 0:
                logging.getLogger("x").info("logged by the child")
                logging.shutdown()
                os._exit(0)
            os.waitpid(pid, 0)
            logging.getLogger("x").info("the parent again")

        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    lines = out.read_text().splitlines()
    assert sorted(lines) == ["buffered in the parent", "logged by the child", "the parent again"]
    assert lines.index("buffered in the parent") < lines.index("the parent again")


@pytest.mark.parametrize("created", [1_700_000_000.0, 1_700_000_000.999, 1_700_000_001.5])
def test_line_formatter_writes_what_the_standard_formatter_writes(created: float) -> None:
    standard, line = logging.Formatter(FORMAT), LineFormatter()
    for at in (created, created + 0.001, created + 1.0, created):  # a cached second, a new one
        record = logging.makeLogRecord(
            {"name": "tether.x", "levelname": "INFO", "levelno": 20, "msg": "a %s", "args": ("b",)}
        )
        record.created, record.msecs = at, int((at - int(at)) * 1000) + 0.0
        assert line.format(record) == standard.format(record)


def test_setup_logging_writes_lines_in_the_format_on_stderr() -> None:
    script = (
        "import logging; from tether.logs import setup_logging; setup_logging('info'); "
        "logging.getLogger('tether.x').info('hello %s', 'there')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    line = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO \d+ tether\.x: hello there"
    assert re.fullmatch(line, done.stderr.rstrip("\n"))


RECORD_START = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \d+ ")


def test_text_from_outside_cannot_begin_a_line_that_reads_as_a_record() -> None:
    forged = "bad\n2026-12-07 10:00:00,000 INFO 1 tether.gateway: all clear\rok\x1b[1G\u2028!"
    formatter = LineFormatter()
    try:
        raise ValueError(forged)
    except ValueError:
        record = logging.makeLogRecord(
            {"name": "tether.worker", "levelname": "ERROR", "levelno": 40, "msg": "x: raised"}
        )
        record.exc_info = sys.exc_info()
    written = [
        formatter.format(record),  # a traceback ending in the exception's text
        formatter.line("tether.worker", logging.INFO, f"invocation x: {forged}"),  # log_line's
    ]
    for text in written:
        first, *rest = text.split("\n")
        assert RECORD_START.match(first)
        assert rest and all(line.startswith("  ") for line in rest), text
        assert "\r" not in text and "\x1b" not in text and "\u2028" not in text
        assert "all clear\\rok\\x1b[1G\\u2028!" in text
