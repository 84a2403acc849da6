"""The example agents as a Tether app: ``TETHER_APP=examples.agents.app:app tether gateway``.

Loads every ``<id>/agent.md`` next to this file, with tools from ``tools.py`` and skills from
``skills/``. The ``notes`` agent uses the example MCP server on loopback
(``python -m tether.examples.mcp_server``), which this app admits explicitly: by default only
the workspace host is.
"""

from pathlib import Path

from tether.agents import build_app_from_dir
from tether.agents.mcp import McpConfig

app = build_app_from_dir(Path(__file__).parent, mcp=McpConfig(allow_localhost=True))
