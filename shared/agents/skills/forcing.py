"""``/skill-name`` forcing (spec §6.6): a turn whose user asked for one skill explicitly.

The forced skill's instructions are appended to that run's system prompt; ``load_skill`` stays
available. A name that does not resolve is logged and ignored: the run goes on without it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence

from tether.agents.errors import ToolError
from tether.agents.skills.catalog import SkillCatalog
from tether.agents.skills.render import render_loaded_skill
from tether.agents.types import Message

log = logging.getLogger(__name__)

SKILL_COMMAND = re.compile(r"^/([A-Za-z0-9][A-Za-z0-9_.:-]*)\s*")
MAX_SKILL_CHARS = 256
FORCED_SKILL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,255}$")
"""What a requested skill name may look like (the command's token, at most 256 characters)."""


def split_skill_command(text: str, explicit: str | None = None) -> tuple[str | None, str]:
    """``(skill, text)``: an explicit skill wins and leaves the text alone; otherwise a leading
    ``/name`` is split off, and a message that was only the command asks to use the skill."""
    if explicit is not None:
        return explicit, text
    match = SKILL_COMMAND.match(text)
    if match is None or len(match.group(1)) > MAX_SKILL_CHARS:
        return None, text
    skill = match.group(1)
    rest = text[match.end() :]
    return skill, rest if rest.strip() else f"Use the {skill} skill."


def choose_skill(
    catalog: SkillCatalog | None, explicit: str | None, messages: Sequence[Message]
) -> tuple[str | None, list[Message]]:
    """The skill to force and the messages to send: an explicit skill as given; else a leading
    ``/name`` of the last user message, split off only when it names a skill this agent sees
    (so ``/etc/hosts is …`` stays a plain message)."""
    out = list(messages)
    if explicit is not None:
        return explicit, out
    if catalog is None or not out or out[-1].role != "user":
        return None, out
    skill, text = split_skill_command(out[-1].content)
    if skill is None:
        return None, out
    try:
        catalog.resolve(skill)
    except ToolError:
        return None, out
    out[-1] = dataclasses.replace(out[-1], content=text)
    return skill, out


def forced_skill_addendum(agent: str, catalog: SkillCatalog | None, name: str) -> str | None:
    """The system-prompt addendum for a forced skill, or None (no catalog, or no such skill:
    either is logged)."""
    if catalog is None:
        log.warning("Agent '%s': ignoring the requested skill: the agent has no skills", agent)
        return None
    try:
        skill = catalog.resolve(name)
    except ToolError as exc:
        log.warning("Agent '%s': ignoring the requested skill: %s", agent, exc)
        return None
    return (
        f'The user explicitly requested the "{skill.name}" skill for this turn. Its '
        f"instructions:\n\n{render_loaded_skill(skill)}"
    )
