"""``tether run-agent``: run one agent from a folder on the command line, without a server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TextIO

from tether.agents.errors import AgentError
from tether.agents.loader import load_agents_dir
from tether.agents.mcp.config import McpConfig
from tether.agents.runner import run_agent
from tether.agents.types import AgentEvent

AGENTS_DIR_ENV = "TETHER_AGENTS_DIR"
DEFAULT_AGENTS_DIR = "agents"


def run_agent_command(
    agents_dir: str | None,
    agent: str | None,
    input_text: str,
    *,
    tools: str | None = None,
    out: TextIO | None = None,
) -> int:
    """Print each event as a JSON line, then the final text; 0 on success, 1 on an error, 2 when
    there is no agents folder.

    ``agents_dir`` defaults to $TETHER_AGENTS_DIR, then ``./agents``; ``tools`` (a module name or
    a ``.py`` path) defaults to ``<agents_dir>/tools.py``. Errors print a safe message to stderr.
    """
    stream = out or sys.stdout
    folder = Path(agents_dir or os.environ.get(AGENTS_DIR_ENV) or DEFAULT_AGENTS_DIR)
    if not folder.is_dir():
        print(
            f"error: no agents folder at {str(folder)!r}: pass --agents DIR (a folder of "
            f"Markdown agents) or set {AGENTS_DIR_ENV}",
            file=sys.stderr,
        )
        return 2

    async def show(event: AgentEvent) -> None:
        print(json.dumps(event, ensure_ascii=False), file=stream, flush=True)

    try:
        registry = load_agents_dir(folder, tools=tools, mcp=McpConfig(allow_localhost=True))
        definition = registry.get(agent)
        model = registry.model_for(definition)
        result = asyncio.run(
            run_agent(definition, input_text, model=model, limits=registry.limits, on_event=show)
        )
    except (AgentError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result.text, file=stream)
    return 0
