"""Records, inside a worker process, the statements that read or change queued invocations (the
claim among them), with the parameters of one of their calls, so the bench can ``EXPLAIN
(ANALYZE, BUFFERS)`` them afterwards on the same data (``bench/scenarios/backlog.py``).

Loaded through a ``sitecustomize`` module that the scenario puts first on the worker's
``PYTHONPATH``; it writes ``<TETHER_BENCH_CAPTURE>-<pid>.json``. Nothing here runs otherwise:
no product code imports the benchmark.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

SAMPLED_AT = {1, 10, 100, 1000}  # a call's parameters are kept at these counts (and every 1000th)
WRITE_EVERY = 1.0  # seconds between writes of the counts, at most
KINDS = ("SELECT", "UPDATE", "WITH", "DELETE")
IN_LIST = re.compile(r"\((?:%\([^)]*\)s(?:::\w+)?(?:,\s*)?)+\)")
LONGEST_LINE = 400  # plan lines naming hundreds of ids are cut here


def shape(statement: str) -> str:
    """A statement with its expanded ``IN (...)`` lists collapsed, on one line: the calls of one
    query with different numbers of ids are one shape."""
    return " ".join(IN_LIST.sub("(...)", statement).split())


class Capture:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.calls: dict[str, int] = {}
        self.samples: dict[str, dict[str, Any]] = {}
        self.seconds: dict[str, float] = {}  # wall time the client waited, per shape
        self.written = float("-inf")

    def wanted(self, statement: str, parameters: Any) -> bool:
        if "tether_invocations" not in statement:
            return False
        if not statement.lstrip().upper().startswith(KINDS):
            return False
        values = parameters.values() if isinstance(parameters, dict) else parameters or ()
        return "'queued'" in statement or any(v == "queued" for v in values)

    def before_execute(
        self,
        conn: Any,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        if executemany or not self.wanted(statement, parameters):
            return
        key = shape(statement)
        conn.info.setdefault("bench_capture", []).append((key, time.perf_counter()))
        calls = self.calls.get(key, 0) + 1
        self.calls[key] = calls
        sampled = calls in SAMPLED_AT or calls % 1000 == 0
        if sampled:
            self.samples[key] = {"shape": key, "statement": statement, "parameters": parameters}
        if sampled or time.monotonic() - self.written > WRITE_EVERY:
            self.write()

    def after_execute(
        self,
        conn: Any,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        pending = conn.info.get("bench_capture")
        if executemany or not pending or not self.wanted(statement, parameters):
            return
        key, started = pending.pop()
        self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - started

    def write(self) -> None:
        """The samples with every shape's calls so far (the counts lag by ``WRITE_EVERY``)."""
        self.written = time.monotonic()
        found = [
            {**s, "calls": self.calls[k], "seconds": self.seconds.get(k, 0.0)}
            for k, s in self.samples.items()
        ]
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(found, default=str))
        partial.replace(self.path)


def install() -> None:
    target = os.environ.get("TETHER_BENCH_CAPTURE")
    if target:
        capture = Capture(Path(f"{target}-{os.getpid()}.json"))
        event.listen(Engine, "before_cursor_execute", capture.before_execute)
        event.listen(Engine, "after_cursor_execute", capture.after_execute)
        atexit.register(capture.write)  # the last counts, when the process exits cleanly


def read(target: Path) -> list[dict[str, Any]]:
    """Every statement captured under ``target`` (all processes), the most called first."""
    merged: dict[str, dict[str, Any]] = {}
    for path in sorted(target.parent.glob(f"{target.name}-*.json")):
        for sample in json.loads(path.read_text()):
            known = merged.get(sample["shape"])
            if known is None or sample["calls"] > known["calls"]:
                merged[sample["shape"]] = sample
    return sorted(merged.values(), key=lambda s: -int(s["calls"]))


SITECUSTOMIZE = "import bench.claim_capture\n\nbench.claim_capture.install()\n"
