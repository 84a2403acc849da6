"""The example agents as a Tether app: ``TETHER_APP=examples.agents.app:app tether gateway``.

Loads every ``<id>/agent.md`` next to this file, with tools from ``tools.py``.
"""

from pathlib import Path

from tether.agents import build_app_from_dir

app = build_app_from_dir(Path(__file__).parent)
