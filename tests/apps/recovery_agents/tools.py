"""A tool with a visible side effect: each execution appends a line to $TETHER_TEST_TOOL_LOG."""

from __future__ import annotations

import os

from tether.agents import tool


@tool(effect="write")
def step(n: int) -> str:
    """Record that step n ran."""
    with open(os.environ["TETHER_TEST_TOOL_LOG"], "a") as log:
        log.write(f"{n} {os.getpid()}\n")
    return f"step {n} done"
