"""Loading an agents folder: ``<id>/agent.md`` or ``<id>/agent.py``, plus a tools module.

Sub-agents resolve in two passes (spec §4.3): every definition is built first, then each
``agents:`` reference is bound, a code agent winning over a Markdown one with the same id.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from tether.agents.approvals import ApprovalPolicy
from tether.agents.definitions import (
    AGENT_NAME,
    AgentDefinition,
    Tool,
    normalize_tools,
    reachable,
)
from tether.agents.errors import DefinitionError, read_definition
from tether.agents.markdown import definition_from_markdown, parse_front_matter, sub_agent_refs
from tether.agents.mcp.agent_tools import admit_servers
from tether.agents.mcp.config import McpConfig
from tether.agents.mcp.hub import McpHub
from tether.agents.registry import AgentRegistry
from tether.agents.skills.attach import attach_skills
from tether.agents.tools import tools_from
from tether.agents.types import Limits, ModelAdapter

log = logging.getLogger(__name__)

RESERVED_FOLDERS = frozenset({"skills"})
TOOLS_FILE = "tools.py"


def _import_file(path: Path, prefix: str) -> ModuleType:
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(f"{prefix}_{digest}", path)
    if spec is None or spec.loader is None:
        raise DefinitionError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_tools(source: str | Path | ModuleType | Mapping[str, Any] | None) -> dict[str, Tool]:
    """Tools from a module (object, dotted name or ``.py`` path) or a mapping of name → tool."""
    if source is None:
        return {}
    if isinstance(source, Mapping):
        return normalize_tools(source)
    if isinstance(source, ModuleType):
        module = source
    elif str(source).endswith(".py") or isinstance(source, Path):
        module = _import_file(Path(source), "tether_agent_tools")
    else:
        module = importlib.import_module(str(source))
    return normalize_tools(tools_from(vars(module)))


def _code_agent(path: Path) -> AgentDefinition:
    module = _import_file(path, "tether_code_agent")
    agent = getattr(module, "agent", None)
    if not isinstance(agent, AgentDefinition):
        raise DefinitionError(f"{path}: must define 'agent = create_agent(...)'")
    return agent


def _scan(root: Path) -> list[Path]:
    """Agent folders in sorted order; top-level Markdown files are an error."""
    stray = sorted(p.name for p in root.glob("*.md"))
    if stray:
        raise DefinitionError(
            f"{root}: unsupported top-level markdown file(s) {stray}; put each "
            "agent in its own folder as <id>/agent.md"
        )
    folders = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if folder.name in RESERVED_FOLDERS or folder.name.startswith((".", "_")):
            continue
        md, py = folder / "agent.md", folder / "agent.py"
        if md.exists() and py.exists():
            raise DefinitionError(
                f"Agent '{folder.name}' is defined as both a code agent "
                "(agent.py) and a markdown agent (agent.md)"
            )
        if not md.exists() and not py.exists():
            log.warning("Skipping %s: no agent.md or agent.py", folder)
            continue
        if not AGENT_NAME.match(folder.name):  # the id becomes a tool name and a step name
            raise DefinitionError(
                f"{folder}: agent folder name {folder.name!r} must match {AGENT_NAME.pattern}"
            )
        folders.append(folder)
    return folders


def _bind_sub_agents(
    defs: dict[str, AgentDefinition],
    refs: dict[str, list[str]],
    code: Mapping[str, AgentDefinition],
) -> None:
    """Pass 2: bind ``agents:`` references (mutual delegation is allowed, depth-bounded)."""
    for agent_id, agent_refs in refs.items():
        agent = defs[agent_id]
        for ref in agent_refs:
            if ref == agent_id:
                raise DefinitionError(
                    f"{agent.where}: agent '{agent_id}' cannot reference itself in 'agents:'"
                )
            child = code.get(ref) or defs.get(ref)
            if child is None:
                available = ", ".join(sorted({*defs, *code}))
                raise DefinitionError(
                    f"{agent.where}: 'agents' references unknown agent '{ref}'."
                    f" Available: {available}"
                )
            agent.agents[ref] = child


def _markdown_agents(
    root: Path, tools: Mapping[str, Tool], code: dict[str, AgentDefinition]
) -> dict[str, AgentDefinition]:
    defs: dict[str, AgentDefinition] = {}
    refs: dict[str, list[str]] = {}
    for folder in _scan(root):
        agent_id = folder.name
        if (folder / "agent.py").exists():
            if agent_id in code:
                log.warning(
                    "Agent '%s' is both discovered (%s) and passed in code; ignoring the "
                    "code entry",
                    agent_id,
                    folder / "agent.py",
                )
            code[agent_id] = _code_agent(folder / "agent.py")
            continue
        path = folder / "agent.md"
        text = read_definition(path, "agent file")
        defs[agent_id] = definition_from_markdown(agent_id, path, text, tools)
        refs[agent_id] = sub_agent_refs(parse_front_matter(text, path).front_matter, path)
    _bind_sub_agents(defs, refs, code)
    return defs


def load_agents_dir(
    path: str | Path,
    *,
    tools: str | Path | ModuleType | Mapping[str, Any] | None = None,
    code_agents: Sequence[AgentDefinition] = (),
    default_agent: str | None = None,
    default_model: ModelAdapter | str | None = None,
    limits: Limits | None = None,
    approval: ApprovalPolicy | None = None,
    skills_dir: str | Path | None = None,
    auto_inherit_skills: bool = False,
    mcp: McpConfig | None = None,
) -> AgentRegistry:
    """A registry of every agent in ``path`` plus ``code_agents`` (code wins on a collision).

    Tools named in front matter come from ``tools``; when it is None, ``<path>/tools.py`` is
    loaded if it exists. A missing folder gives a registry with only the code agents.
    ``approval`` is the run-wide approval policy (default: gate write/update/destructive tools,
    one hour to decide). Skills come from ``<path>/<id>/skills/`` (that agent's), and, for the
    agents that name them in ``skills:`` (every agent with ``auto_inherit_skills``), from
    ``<path>/skills/`` and ``skills_dir``. ``mcp`` is how agents reach their MCP servers (host
    policy; by default the workspace host only): every server URL is checked here.
    """
    root = Path(path)
    if tools is None and (root / TOOLS_FILE).is_file():
        tools = root / TOOLS_FILE
    ambient = load_tools(tools)
    code = {a.name: a for a in code_agents}
    markdown = _markdown_agents(root, ambient, code) if root.is_dir() else {}
    for name in sorted(set(markdown) & set(code)):
        log.warning(
            "Agent '%s' is defined in code and in %s; the code definition takes precedence",
            name,
            markdown[name].source,
        )
    agents = {**markdown, **code}
    every = reachable(agents.values())
    attach_skills(
        every, root if root.is_dir() else None, skills_dir, auto_inherit=auto_inherit_skills
    )
    hub = McpHub(mcp)
    admit_servers(every, hub)
    registry = AgentRegistry(
        dict(sorted(agents.items())),
        default_agent,
        default_model,
        limits or Limits(),
        approval or ApprovalPolicy(),
        explicit_limits=limits is not None,
        mcp=hub,
    )
    if default_agent is not None:
        registry.default_name()  # an unknown configured default fails at load, not at first run
    return registry
