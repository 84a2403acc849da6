"""``tether.logs.log_line``: the line Tether's handler alone would take is formatted and buffered
without a record, and is the very line the standard call writes; anything that could see or
change a record (another handler, a filter, a record factory, a format with other fields) gets
the standard call."""

from __future__ import annotations

import io
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from dramatiq.cli import LOGFORMAT as DRAMATIQ_LOG_FORMAT

from tether.logs import FORMAT, DirectInfo, LineFormatter, TurnBufferedHandler, log_line

NOW_NS = 1_764_999_999_123_456_789
CHAINS = itertools.count()


@pytest.fixture(params=[NOW_NS, 1_764_999_999_999_999_900], ids=["now", "a second's end"])
def frozen(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> float:
    """One moment for both paths: a record's (``time.time`` or ``time.time_ns``, by version)
    and the direct line's; the second has its last millisecond."""
    monkeypatch.setattr(time, "time_ns", lambda: request.param)
    monkeypatch.setattr(time, "time", lambda: request.param / 1e9)
    return float(request.param / 1e9)


class Chain:
    """A logger under a parent that holds the only handler, as ``setup_logging`` leaves
    ``aiohttp.access`` under the root."""

    def __init__(self, fmt: str = FORMAT) -> None:
        self.stream = io.StringIO()
        self.handler = TurnBufferedHandler(self.stream)
        self.handler.setFormatter(LineFormatter(fmt))
        self.parent = logging.getLogger(f"tether.test_log_line.{next(CHAINS)}")
        self.parent.propagate = False
        self.parent.setLevel(logging.INFO)
        self.parent.addHandler(self.handler)
        self.logger = logging.getLogger(f"{self.parent.name}.child")

    def remove(self) -> None:
        """Forget both loggers (pytest adds its handler to every logger that does not
        propagate, and a name used again would bring it back)."""
        self.parent.removeHandler(self.handler)
        for logger in (self.logger, self.parent):
            logging.Logger.manager.loggerDict.pop(logger.name, None)

    def lines(self) -> list[str]:
        self.handler.flush()
        text, _ = self.stream.getvalue(), self.stream.truncate(0)
        self.stream.seek(0)
        return text.splitlines()


@pytest.fixture
def chain() -> Iterator[Chain]:
    """Made when first used in the test's body: pytest adds its capture handler to every logger
    that does not propagate when the test starts (a second handler: the standard call)."""
    made: list[Chain] = []

    class Late:
        def __getattr__(self, name: str) -> Any:
            if not made:
                made.append(Chain())
            return getattr(made[0], name)

    yield Late()  # type: ignore[misc]
    for one in made:
        one.remove()


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> list[logging.LogRecord]:
    """Every record made from now on (none is on the direct path). Counted in the record's own
    constructor: a patched ``Logger.makeRecord`` would itself turn the direct path off."""
    made: list[logging.LogRecord] = []
    original = logging.LogRecord.__init__

    def counting(self: logging.LogRecord, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(logging.LogRecord, "__init__", counting)
    return made


@pytest.mark.parametrize("fmt", [FORMAT, DRAMATIQ_LOG_FORMAT], ids=["tether", "dramatiq"])
def test_the_direct_line_is_the_line_the_standard_call_writes(
    frozen: float, records: list[logging.LogRecord], fmt: str
) -> None:
    chain = Chain(fmt)

    def both() -> list[str]:
        chain.logger.info('%s "%s %s" %d %.1f ms', "127.0.0.1", "GET", "/x?a=%41", 200, 0.53)
        log_line(
            chain.logger,
            logging.INFO,
            '%s "%s %s" %d %.1f ms',
            "127.0.0.1",
            "GET",
            "/x?a=%41",
            200,
            0.53,
        )
        chain.logger.warning("no args: 100%")
        log_line(chain.logger, logging.WARNING, "no args: 100%")
        return chain.lines()

    standard, direct, plain, plain_direct = both()
    assert direct == standard and plain_direct == plain
    assert f",{int((frozen - int(frozen)) * 1000):03d}" in standard
    named: dict[str, list[str]] = {}  # another thread's name, where the format has one
    worker = threading.Thread(target=lambda: named.setdefault("lines", both()), name="worker-7")
    worker.start()
    worker.join()
    assert named["lines"][0] == named["lines"][1]
    assert ("worker-7" in named["lines"][0]) == ("threadName" in fmt)
    assert len(records) == 4  # the standard calls' alone
    chain.remove()


def test_the_direct_line_makes_no_record(chain: Chain, records: list[logging.LogRecord]) -> None:
    log_line(chain.logger, logging.INFO, "a %s", "b")
    log_line(chain.logger, logging.DEBUG, "below the level")
    assert records == []
    assert [line.split(": ", 1)[1] for line in chain.lines()] == ["a b"]


@pytest.mark.parametrize(
    "change",
    [
        "another handler",
        "a logger filter",
        "a handler filter",
        "a record factory",
        "a format with other fields",
        "a date format",
    ],
)
def test_anything_that_could_see_or_change_the_record_gets_the_standard_call(
    chain: Chain, records: list[logging.LogRecord], change: str
) -> None:
    seen: list[logging.LogRecord] = []
    keep = logging.getLogRecordFactory()

    def sees(record: logging.LogRecord) -> logging.LogRecord:
        seen.append(record)
        return record

    other = logging.Handler()
    other.emit = sees  # type: ignore[method-assign,assignment]
    if change == "another handler":
        chain.logger.addHandler(other)
    elif change == "a logger filter":
        chain.logger.addFilter(lambda record: bool(sees(record)))
    elif change == "a handler filter":
        chain.handler.addFilter(lambda record: bool(sees(record)))
    elif change == "a record factory":
        logging.setLogRecordFactory(lambda *a, **k: sees(keep(*a, **k)))
    elif change == "a format with other fields":
        chain.handler.setFormatter(LineFormatter("%(funcName)s:%(lineno)d %(message)s"))
    else:
        dated = LineFormatter()
        dated.datefmt = "%H:%M"
        chain.handler.setFormatter(dated)
    try:
        log_line(chain.logger, logging.INFO, "hello %s", "there")
        lines = chain.lines()
    finally:
        logging.setLogRecordFactory(keep)
        chain.logger.removeHandler(other)
        chain.logger.filters.clear()
    assert lines and lines[0].endswith("hello there")
    assert [r.getMessage() for r in records] == ["hello there"]
    if change == "a format with other fields":  # the record names the caller, not log_line
        assert lines[0].startswith("test_anything_that_could_see_or_change_the_record_gets")
    elif change != "a date format":
        assert [r.getMessage() for r in seen] == ["hello there"]


def test_a_level_the_handler_drops_and_a_disabled_logger_write_nothing(chain: Chain) -> None:
    chain.handler.setLevel(logging.WARNING)
    log_line(chain.logger, logging.INFO, "dropped by the handler")
    chain.handler.setLevel(logging.NOTSET)
    chain.logger.disabled = True
    try:
        log_line(chain.logger, logging.INFO, "dropped by the logger")
    finally:
        chain.logger.disabled = False
    assert chain.lines() == []


def test_arguments_that_do_not_format_are_reported_as_the_standard_call_reports_them(
    chain: Chain, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported: list[logging.LogRecord] = []
    monkeypatch.setattr(chain.handler, "handleError", reported.append)
    log_line(chain.logger, logging.INFO, "%d apples", "some")
    assert [r.msg for r in reported] == ["%d apples"] and chain.lines() == []


def test_direct_info_takes_the_direct_path_for_info_alone(
    chain: Chain, records: list[logging.LogRecord]
) -> None:
    log = DirectInfo(chain.logger)
    log.info("started %s", "x")
    log.warning("careful %s", "y")
    log.info("with kwargs %s", "z", extra={"k": 1})
    assert [r.getMessage() for r in records] == ["careful y", "with kwargs z"]
    here = test_direct_info_takes_the_direct_path_for_info_alone.__name__
    assert [r.funcName for r in records] == [here, here]  # the caller's, not the adapter's
    assert [line.split(": ", 1)[1] for line in chain.lines()] == [
        "started x",
        "careful y",
        "with kwargs z",
    ]


class Broken:
    """A stream whose every write fails, as a closed pipe's does."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        pass


def test_a_write_that_fails_is_reported_not_raised(
    chain: Chain, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported: list[logging.LogRecord] = []
    monkeypatch.setattr(chain.handler, "handleError", reported.append)
    chain.handler.setStream(Broken())  # type: ignore[arg-type]
    log_line(chain.logger, logging.INFO, "lost %s", "line")  # no loop here: written at once
    assert [r.getMessage() for r in reported] and reported[0].getMessage().endswith("lost line")
