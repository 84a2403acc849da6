"""Which skills an agent sees, and under which names (spec §6.3).

An agent always sees its own skills (``<agents>/<id>/skills/``); it sees shared skills (the
agents folder's ``skills/`` and the configured skills folder) when it names them in
``skills:``, or all of them with auto-inherit. A name visible from one source is addressed by
its bare name; one visible from several sources is addressed only as ``<scope>:<name>``
(``agent:``, ``bundle:``, ``library:``) and the bare name is ambiguous. Two skills with the same
name in the same source are an error.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from tether.agents.errors import DefinitionError, ToolError
from tether.agents.skills.parse import Skill

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SkillCatalog:
    """The skills one agent sees: ``entries`` by address (sorted), ``ambiguous`` bare names."""

    entries: dict[str, Skill]
    ambiguous: dict[str, list[str]] = field(default_factory=dict)

    def listing(self) -> list[dict[str, str]]:
        """``[{name: address, description}]`` in address order (prompt, clients)."""
        return [{"name": a, "description": s.description} for a, s in self.entries.items()]

    def resolve(self, requested: str) -> Skill:
        """The skill at a bare or qualified address; raises :class:`ToolError` (model-visible)."""
        if requested in self.ambiguous:
            choices = ", ".join(self.ambiguous[requested])
            raise ToolError(f"Skill '{requested}' is ambiguous; specify one of: {choices}.")
        skill = self.entries.get(requested)
        if skill is None:
            available = ", ".join(self.entries) or "<none>"
            raise ToolError(f"Unknown skill '{requested}'. Available: {available}.")
        return skill


def _visible(
    agent: str,
    local: Sequence[Skill],
    shared: Sequence[Skill],
    wanted: Sequence[str] | None,
    auto_inherit: bool,
) -> list[Skill]:
    if auto_inherit:
        return [*local, *shared]
    if not wanted:
        return list(local)
    names = set(wanted)
    missing = sorted(names - {s.name for s in (*local, *shared)})
    for name in missing:
        log.warning("Agent '%s' lists skill '%s', which was found nowhere", agent, name)
    return [*local, *(s for s in shared if s.name in names)]


def resolve_catalog(
    agent: str,
    local: Sequence[Skill],
    shared: Sequence[Skill],
    wanted: Sequence[str] | None = None,
    *,
    auto_inherit: bool = False,
) -> SkillCatalog | None:
    """The agent's catalog, or None when it sees no skill (no prompt block, no skill tools)."""
    groups: dict[str, list[Skill]] = defaultdict(list)
    for skill in _visible(agent, local, shared, wanted, auto_inherit):
        groups[skill.name].append(skill)
    entries: dict[str, Skill] = {}
    ambiguous: dict[str, list[str]] = {}
    for name, skills in groups.items():
        by_source: dict[str, Skill] = {}
        for skill in skills:
            if skill.source in by_source:
                raise DefinitionError(
                    f"Agent '{agent}': two '{skill.source}' skills are both named '{name}' "
                    f"({by_source[skill.source].directory} and {skill.directory}). Skill names "
                    "must be unique within a source."
                )
            by_source[skill.source] = skill
        if len(skills) == 1:
            entries[name] = skills[0]
            continue
        addresses = sorted(s.qualified for s in skills)
        ambiguous[name] = addresses
        entries.update({s.qualified: s for s in skills})
        log.warning("Agent '%s': skill '%s' is ambiguous; use one of %s", agent, name, addresses)
    if not entries:
        return None
    return SkillCatalog(dict(sorted(entries.items())), ambiguous)
