"""Giving each agent of a registry its skill catalog, when the registry loads."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from tether.agents.definitions import AgentDefinition
from tether.agents.skills.catalog import resolve_catalog
from tether.agents.skills.discover import load_skills_dir
from tether.agents.skills.parse import Skill

SKILLS_FOLDER = "skills"


def shared_skills(agents_dir: Path | None, skills_dir: str | Path | None) -> list[Skill]:
    """The agents folder's ``skills/`` then the configured skills folder (once, if the same)."""
    bundle = agents_dir / SKILLS_FOLDER if agents_dir is not None else None
    skills = load_skills_dir(bundle, "bundle-global")
    if skills_dir is not None:
        same = bundle is not None and os.path.realpath(bundle) == os.path.realpath(skills_dir)
        if not same:
            skills += load_skills_dir(skills_dir, "library")
    return skills


def attach_skills(
    agents: Iterable[AgentDefinition],
    agents_dir: Path | None,
    skills_dir: str | Path | None = None,
    *,
    auto_inherit: bool = False,
) -> None:
    """Set ``agent.skills`` for every agent: its own folder's ``skills/`` (Markdown agents),
    plus the shared skills it names in ``skills:`` (all of them with ``auto_inherit``)."""
    shared = shared_skills(agents_dir, skills_dir)
    for agent in agents:
        folder = agent.source.parent / SKILLS_FOLDER if agent.source is not None else None
        local = load_skills_dir(folder, "bundle-agent")
        agent.skills = resolve_catalog(
            agent.name, local, shared, agent.skill_refs, auto_inherit=auto_inherit
        )
