"""Logging: the CPU of one log line as Tether's commands write it (``tether.logs``: a loop turn's
lines in one write, the time of day formatted once a second) against the standard library's
``StreamHandler`` and ``Formatter`` in the same format, which the commands used before; and the
lines logged per request and per attempt, which take :func:`tether.logs.log_line` (formatted and
buffered without a record) to the same handler, against the same standard one.

Both write to a file opened line-buffered, as a service's stderr is, through a logger of the
bench's own (the bench's logging is left as it is). A round logs the lines of one loop turn and
lets the loop turn; rounds alternate between the two handlers and each figure is the median
CPU per line: turns of :data:`LINES_PER_TURN` lines (a no-op invocation in ``tether dev``
logs four: its start, its end, the POST's and the status read's access lines) and turns of one
line (the least a turn can batch).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from bench.report import Row
from bench.scenarios.common import Sizes
from tether.logs import FORMAT, log_line, turn_buffered

LINES_PER_TURN = 4
INVOCATION_ID = "0a3f1c2e-5d8b-4c6a-9f1e-2b3c4d5e6f70"


@dataclass
class Side:
    logger: logging.Logger
    direct: bool = False
    """Through :func:`tether.logs.log_line`, as the access line and the attempts' lines are."""
    cpu_per_line: list[float] = field(default_factory=list)

    async def round(self, lines: int, turns: int) -> None:
        logger, started = self.logger, time.process_time()
        for _ in range(turns):
            for _ in range(lines):
                if self.direct:
                    log_line(
                        logger, logging.INFO, "invocation %s: attempt %d started", INVOCATION_ID, 1
                    )
                else:
                    logger.info("invocation %s: attempt %d started", INVOCATION_ID, 1)
            await asyncio.sleep(0)
        await asyncio.sleep(0)  # the last turn's lines written
        self.cpu_per_line.append((time.process_time() - started) / (lines * turns))

    @property
    def us(self) -> float:
        return statistics.median(self.cpu_per_line) * 1e6


def side(name: str, handler: logging.Handler, direct: bool = False) -> Side:
    logger = logging.getLogger(f"bench.log_lines.{name}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return Side(logger, direct)


def standard(stream: TextIO) -> logging.Handler:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT))
    return handler


async def measure(stream: TextIO, lines: int, turns: int, rounds: int) -> tuple[Side, Side, Side]:
    """Tether's handler through the logging call, the same through :func:`log_line`, and the
    standard handler, their rounds alternating."""
    sides = (
        side(f"tether{lines}", turn_buffered(stream)),
        side(f"direct{lines}", turn_buffered(stream), direct=True),
        side(f"std{lines}", standard(stream)),
    )
    for s in sides:
        await s.round(lines, turns)  # warm
        s.cpu_per_line.clear()
    for _ in range(rounds):
        for s in sides:
            await s.round(lines, turns)
    for s in sides:
        for handler in s.logger.handlers:
            handler.flush()
    return sides


async def run(sizes: Sizes) -> list[Row]:
    rounds, turns = sizes.log_rounds, sizes.log_turns
    rows = []
    with tempfile.TemporaryDirectory(prefix="tether-bench-logging-") as folder:
        stream = await asyncio.to_thread(Path(folder, "stderr.log").open, "w", buffering=1)
        with stream:
            for lines in (LINES_PER_TURN, 1):
                ours, direct, theirs = await measure(stream, lines, turns, rounds)
                details = {"rounds": rounds, "turns": turns, "lines_per_turn": lines}
                for how, measured in (("", ours), (" through log_line", direct)):
                    rows.append(
                        Row(
                            "logging",
                            f"CPU µs per log line{how}, {lines} a loop turn "
                            f"(median of {rounds} rounds)",
                            measured.us,
                            "µs",
                            "lower",
                            theirs.us,
                            "the standard StreamHandler and Formatter",
                            details=details,
                        )
                    )
    return rows
