"""One module per scenario; each ``run(sizes)`` returns rows, every figure beside its baseline."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from bench.report import Row
from bench.scenarios import (
    accept,
    backlog,
    caps,
    cost,
    drain,
    durable,
    embedded,
    embedded_large,
    end_to_end,
    eventlog,
    fanout,
    flood,
    heartbeat,
    idle,
    io_bound,
    large_inputs,
    large_outputs,
    lending,
    log_lines,
    newcomers,
    peer,
    quiet_spell,
    quiet_window,
    retention,
    sidebyside,
    statements,
    streaming,
    sync_latency,
    terminal,
)
from bench.scenarios.common import Sizes

Scenario = Callable[[Sizes], Coroutine[Any, Any, list[Row]]]

SCENARIOS: dict[str, Scenario] = {
    "accept": accept.run,
    "drain": drain.run,
    "e2e": end_to_end.run,
    "sync": sync_latency.run,
    "io": io_bound.run,
    "stream": streaming.run,
    "cost": cost.run,
    "durable": durable.run,
    "peer": peer.run,
    "sidebyside": sidebyside.run,
    "terminal": terminal.run,
    "fanout": fanout.run,
    "eventlog": eventlog.run,
    "flood": flood.run,
    "caps": caps.run,
    "backlog": backlog.run,
    "quietspell": quiet_spell.run,
    "quietwindow": quiet_window.run,
    "heartbeat": heartbeat.run,
    "retention": retention.run,
    "statements": statements.run,
    "embedded": embedded.run,
    "embeddedlarge": embedded_large.run,
    "logging": log_lines.run,
    "newcomers": newcomers.run,
    "lending": lending.run,
    "idle": idle.run,
    "largeinputs": large_inputs.run,
    "largeoutputs": large_outputs.run,
}
