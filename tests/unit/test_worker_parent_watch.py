"""The parent watch of a worker process: it reports an orphan once, stays quiet while the parent
lives, is not installed where no multiprocessing parent supervises the process, and moves an
orphan's output off the dead parent's relay pipe."""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
from typing import Any

import pytest
from dramatiq.cli import LOGFORMAT as DRAMATIQ_LOG_FORMAT

from tether.logs import TurnBufferedHandler
from tether.parent_watch import ParentWatch
from tether.worker.parent_watch import write_output_to_own_stderr

DEADLINE = 10.0


def test_a_process_whose_parent_is_not_the_one_recorded_is_reported_orphaned_once() -> None:
    reported: list[int] = []
    done = threading.Event()

    def orphaned(parent_pid: int) -> None:
        reported.append(parent_pid)
        done.set()

    not_our_parent = os.getppid() + 1_000_000
    watch = ParentWatch(not_our_parent, orphaned, interval=0.01)
    watch.start()
    assert done.wait(DEADLINE) and watch.join(DEADLINE)
    assert reported == [not_our_parent]


def test_a_watch_on_a_live_parent_stays_quiet_until_stopped() -> None:
    reported: list[int] = []
    watch = ParentWatch(os.getppid(), reported.append, interval=0.01)
    watch.start()
    watch.stop()
    assert watch.join(DEADLINE)
    assert reported == []


def test_a_process_multiprocessing_did_not_start_gets_no_watch() -> None:
    assert ParentWatch.of_this_process(print) is None  # the test runner itself


def test_an_orphans_output_goes_to_its_own_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    relay = io.StringIO()  # stands for Dramatiq's pipe to the dead parent
    monkeypatch.setattr(sys, "stdout", relay)
    monkeypatch.setattr(sys, "stderr", relay)
    relayed: logging.StreamHandler[Any] = logging.StreamHandler(relay)
    relayed.setLevel(logging.WARNING)
    own_file: logging.StreamHandler[Any] = logging.StreamHandler(io.StringIO())
    root = logging.getLogger()
    before = list(root.handlers)
    root.addHandler(relayed)
    root.addHandler(own_file)
    try:
        write_output_to_own_stderr()
        added = [h for h in root.handlers if h not in before and h is not own_file]
        assert relayed not in root.handlers and len(added) == 1
        replacement = added[0]
        # Dramatiq's handler, replaced by one writing a loop turn's lines together, in the
        # format and at the level Dramatiq's had
        assert isinstance(replacement, TurnBufferedHandler)
        assert replacement.stream is sys.__stderr__ and replacement.level == logging.WARNING
        assert replacement.formatter is not None
        assert replacement.formatter._fmt == DRAMATIQ_LOG_FORMAT
        assert sys.stderr is sys.__stderr__
        assert sys.stdout is sys.__stderr__  # print() output too, as the relay did
        assert own_file.stream is not sys.__stderr__  # a handler of its own is left alone
        write_output_to_own_stderr()  # again, as an orphan: the same handler stays
        assert [h for h in root.handlers if h not in before and h is not own_file] == [replacement]
    finally:
        for handler in [h for h in root.handlers if h not in before]:
            root.removeHandler(handler)
