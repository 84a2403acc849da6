"""The agent of the skills-and-MCP fault test, configured from the environment of its processes.

``TETHER_TEST_MCP_URL``: the example MCP server the test runs on loopback;
``TETHER_TEST_SKILLS_DIR``: a skills folder the test may change between attempts. The agent
loads the ``trip-notes`` skill and calls the server's ``add_note`` (a write tool: the test is
about crashes, not approvals, so the gate is off).
"""

import os
from pathlib import Path

from tether.agents import ApprovalPolicy, build_agent_app, create_agent, load_agents_dir
from tether.agents.mcp import McpConfig, mcp_server

scribe = create_agent(
    "scribe",
    "Load the trip-notes skill, then add one note about Paris with the notes server; then "
    'say "done".',
    model="openai:fake-model",
    skills=["trip-notes"],
    mcp_servers=[mcp_server("notes", os.environ["TETHER_TEST_MCP_URL"])],
    default=True,
)
registry = load_agents_dir(
    Path(__file__).parent,  # no Markdown agent here: only the code agent
    code_agents=[scribe],
    skills_dir=os.environ["TETHER_TEST_SKILLS_DIR"],
    approval=ApprovalPolicy(require_for_destructive=False),
    mcp=McpConfig(allow_localhost=True),
)
app = build_agent_app(registry)
