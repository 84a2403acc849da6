"""Markdown agents: ``<id>/agent.md`` with YAML front matter (spec §4.2)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tether.agents.adapters.scripted import ScriptedTurn
from tether.agents.approvals import checked_timeout
from tether.agents.definitions import AgentDefinition, Tool, checked_price
from tether.agents.errors import DefinitionError
from tether.agents.mcp.servers import servers_from_front_matter

log = logging.getLogger(__name__)

FENCE = re.compile(r"^---\r?\n([\s\S]*?)\r?\n---\r?\n?([\s\S]*)$")
EMPTY_FENCE = re.compile(r"^---\r?\n---\r?\n?([\s\S]*)$")
KNOWN_KEYS = frozenset(
    {
        "endpoint",
        "model",
        "tools",
        "toolkits",
        "agents",
        "skills",
        "default",
        "maxSteps",
        "maxTokens",
        "generationParams",
        "baseSystemPrompt",
        "auth",
        "ephemeral",
        "description",
        "script",
        "approval",
        "resumeWithoutUser",
        "mcp",
        "mcp_servers",
        "price",
    }
)
APPROVAL_KEYS = frozenset({"timeout"})


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false, so ``yes`` and ``on`` stay strings."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


def load_yaml(text: str) -> Any:
    """YAML with 1.2 booleans (a SafeLoader); raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader


@dataclass(frozen=True, slots=True)
class Parsed:
    front_matter: dict[str, Any]
    body: str


def parse_front_matter(text: str, path: Path | str) -> Parsed:
    """Split front matter from the body; the trimmed body becomes the instructions."""
    if (empty := EMPTY_FENCE.match(text)) is not None:
        return Parsed({}, empty.group(1).strip())
    match = FENCE.match(text)
    if match is None:
        return Parsed({}, text.strip())
    try:
        data = load_yaml(match.group(1))
    except yaml.YAMLError as exc:
        raise DefinitionError(f"Invalid YAML frontmatter ({path}): {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise DefinitionError(f"Frontmatter must be a YAML object ({path})")
    return Parsed(data, match.group(2).strip())


def _typed(fm: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """The value if it has the right type; a wrong type is dropped (spec: silently)."""
    value = fm.get(key)
    if value is None or isinstance(value, bool) and kind is int:
        return None
    return value if isinstance(value, kind) else None


def _positive(fm: Mapping[str, Any], key: str, path: Path) -> int | None:
    """A whole number of at least 1 (another type is dropped, as :func:`_typed` does); 0 or less
    is an error, not a silent default (``maxSteps: 0`` read as 10, ``-1`` as no turn at all)."""
    value = _typed(fm, key, int)
    if value is not None and value < 1:
        raise DefinitionError(f"{path}: '{key}' must be a whole number of at least 1")
    return value  # type: ignore[no-any-return]


def sub_agent_refs(fm: Mapping[str, Any], path: Path) -> list[str]:
    refs = fm.get("agents")
    if refs is None:
        return []
    if not isinstance(refs, list) or not all(isinstance(r, str) and r.strip() for r in refs):
        raise DefinitionError(f"{path}: 'agents' must be a list of non-empty agent ids")
    return list(dict.fromkeys(r.strip() for r in refs))


def _tool_refs(fm: Mapping[str, Any], path: Path, ambient: Mapping[str, Tool]) -> dict[str, Tool]:
    if "toolkits" in fm:
        raise DefinitionError(
            f"{path}: 'toolkits' is no longer supported; list tools by name in 'tools:' instead"
        )
    entries = fm.get("tools")
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise DefinitionError(f"{path}: 'tools' must be a list of tool names")
    out: dict[str, Tool] = {}
    for entry in entries:
        if isinstance(entry, str) and entry.startswith("plugin:"):
            raise DefinitionError(
                f"{path}: 'tools' entry '{entry}': plugin references are not "
                "supported; name a tool from the tools module"
            )
        if entry == "":
            raise DefinitionError(f"{path}: empty string in 'tools:'")
        if not isinstance(entry, str):
            raise DefinitionError(f"{path}: invalid 'tools:' entry {entry!r} (expected a name)")
        if entry not in ambient:
            available = ", ".join(sorted(ambient)) or "<none>"
            raise DefinitionError(
                f"{path}: 'tools' references '{entry}', which is not in the "
                f"tools module. Available: {available}"
            )
        out[entry] = ambient[entry]
    return out


def _script(fm: Mapping[str, Any], path: Path) -> tuple[ScriptedTurn, ...]:
    raw = fm.get("script")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise DefinitionError(f"{path}: 'script' must be a list of turns")
    try:
        return tuple(ScriptedTurn.parse(t) for t in raw)
    except DefinitionError as exc:
        raise DefinitionError(f"{path}: 'script': {exc}") from None


def _approval_timeout(fm: Mapping[str, Any], path: Path) -> float | None:
    """``approval: {timeout: <seconds>}``: this agent's approval timeout (a wrong type is
    dropped, a value under one second is replaced by the default with a warning)."""
    approval = fm.get("approval")
    if not isinstance(approval, dict):
        return None
    for key in approval:
        if key not in APPROVAL_KEYS:
            log.warning("Ignoring unknown frontmatter key 'approval.%s' in %s", key, path)
    value = approval.get("timeout")
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return checked_timeout(value, str(path))


def _skill_refs(fm: Mapping[str, Any], path: Path) -> tuple[str, ...] | None:
    """``skills: [name, …]``: the shared skills this agent opts into."""
    refs = fm.get("skills")
    if refs is None:
        return None
    if not isinstance(refs, list) or not all(isinstance(r, str) and r.strip() for r in refs):
        raise DefinitionError(f"{path}: 'skills' must be a list of skill names")
    return tuple(dict.fromkeys(r.strip() for r in refs))


def _base_prompt(fm: Mapping[str, Any]) -> str | bool | None:
    value = fm.get("baseSystemPrompt")
    return value if value is False or isinstance(value, str) else None


def definition_from_markdown(
    agent_id: str, path: Path, text: str, ambient: Mapping[str, Tool]
) -> AgentDefinition:
    """Pass 1 of loading: one definition, sub-agents left for pass 2."""
    parsed = parse_front_matter(text, path)
    fm = parsed.front_matter
    for key in fm:
        if key not in KNOWN_KEYS:
            log.warning("Ignoring unknown frontmatter key '%s' in %s", key, path)
    auth = fm.get("auth")
    if auth is not None and auth != "on-behalf-of-user":
        raise DefinitionError(f"{path}: 'auth' must be 'on-behalf-of-user'")
    base = _base_prompt(fm)
    return AgentDefinition(
        name=agent_id,
        instructions=parsed.body,
        model=_typed(fm, "model", str) or _typed(fm, "endpoint", str),
        tools=_tool_refs(fm, path, ambient),
        default=fm.get("default") is True,
        description=_typed(fm, "description", str),
        max_steps=_positive(fm, "maxSteps", path),
        max_tokens=_positive(fm, "maxTokens", path),
        generation_params=_typed(fm, "generationParams", dict) or {},
        base_system_prompt=None if base is True else base,
        ephemeral=fm.get("ephemeral") is True,
        auth=auth,
        resume_without_user=fm.get("resumeWithoutUser") is True,
        script=_script(fm, path),
        approval_timeout_s=_approval_timeout(fm, path),
        skill_refs=_skill_refs(fm, path),
        mcp_servers=servers_from_front_matter(fm, path),
        price=checked_price(fm.get("price"), str(path)),
        origin="markdown",
        source=path,
    )
