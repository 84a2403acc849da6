"""The example: ``examples/agents/notes`` loads its skill and calls the example MCP server
(``examples/mcp_server.py``), with no credentials at all."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.agents.conftest import FakeSink, attempt
from tests.agents.mcp_fixtures import Served
from tether.agents import build_app_from_dir
from tether.agents.mcp import McpConfig
from tether.examples.mcp_server import DEFAULT_PORT, build_server

EXAMPLES = Path(__file__).parents[2] / "examples" / "agents"


async def test_the_notes_agent_uses_its_skill_and_the_example_mcp_server(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    served = Served(build_server(log).streamable_http_app(host="127.0.0.1"))
    folder = tmp_path / "agents"
    shutil.copytree(EXAMPLES, folder, ignore=shutil.ignore_patterns("__pycache__"))
    agent_md = folder / "notes" / "agent.md"  # the example's fixed port → this test's
    agent_md.write_text(agent_md.read_text().replace(f":{DEFAULT_PORT}/", f":{served.port}/"))
    app = build_app_from_dir(folder, mcp=McpConfig(allow_localhost=True))
    sink = FakeSink()
    try:
        result = await attempt(app, {"agent": "notes", "messages": "My Paris notes?"}, sink)
    finally:
        await app.shutdown()
        served.stop()
    loaded, style, _ = [e["result"] for e in sink.of_type("tool_result")]
    assert loaded.startswith("# Skill: trip-notes") and "- style.md" in loaded
    assert style.startswith("# Trip notes: house style")
    assert result["text"] == (
        "Paris, from the notes: Louvre closed on Tuesdays\nBook the Eiffel Tower a week ahead"
    )
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["search_notes"]
