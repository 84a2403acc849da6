"""A small MCP server for the example agents: trip notes, on http://127.0.0.1:8765/mcp.

Run it beside ``tether dev --agents examples/agents``::

    .venv/bin/python -m tether.examples.mcp_server            # or: python examples/mcp_server.py

It is built on the official MCP SDK (``MCPServer``) and speaks streamable HTTP on loopback
only. ``search_notes`` is read-only (an agent calls it without asking anyone);
``add_note`` writes, so an agent's call to it waits for a human's approval.
``--call-log FILE`` appends one line per tool call (``<tool> <pid>``), which the tests count.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

DEFAULT_PORT = 8765
SEED = {
    "paris": ["Louvre closed on Tuesdays", "Book the Eiffel Tower a week ahead"],
    "oslo": ["Bring crampons in winter"],
}


def build_server(call_log: Path | None = None) -> MCPServer:
    """The notes server; every tool call is appended to ``call_log`` when given."""
    server = MCPServer("notes", instructions="Trip notes, by city.")
    notes = {city: list(items) for city, items in SEED.items()}

    def logged(tool: str) -> None:
        if call_log is not None:
            with call_log.open("a") as handle:
                handle.write(f"{tool} {os.getpid()}\n")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def search_notes(city: str) -> list[str]:
        """The notes kept about a city."""
        logged("search_notes")
        return notes.get(city.strip().lower(), [])

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
    def add_note(city: str, text: str) -> str:
        """Add a note about a city."""
        logged("add_note")
        notes.setdefault(city.strip().lower(), []).append(text)
        return f"Noted for {city}: {text}"

    return server


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--call-log", type=Path, help="append '<tool> <pid>' per tool call")
    args = parser.parse_args(argv)
    server = build_server(args.call_log)
    server.run("streamable-http", host="127.0.0.1", port=args.port)  # loopback only


if __name__ == "__main__":
    main()
