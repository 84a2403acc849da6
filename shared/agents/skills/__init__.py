"""Agent Skills (spec §6): ``<name>/SKILL.md`` folders an agent loads on demand.

A skill is discovered from the agents folder (``<agents>/<id>/skills/`` for that agent alone,
``<agents>/skills/`` for every agent that opts in) and from a configured skills folder (opt-in
too). Each agent sees a catalog of the skills visible to it, listed in its system prompt, and
loads one with the built-in ``load_skill`` tool; ``read_skill_file`` reads a file the skill
bundles, inside its folder only. Both tools' results are recorded as the tool call's durable
step, so a recovered run replays them and never re-reads a file that changed since.
"""

from tether.agents.skills.catalog import SkillCatalog, resolve_catalog
from tether.agents.skills.discover import load_skills_dir
from tether.agents.skills.forcing import forced_skill_addendum, split_skill_command
from tether.agents.skills.parse import Skill, SkillSource, parse_skill
from tether.agents.skills.render import render_loaded_skill, render_skill_catalog
from tether.agents.skills.resource import read_skill_resource

__all__ = [
    "Skill",
    "SkillCatalog",
    "SkillSource",
    "forced_skill_addendum",
    "load_skills_dir",
    "parse_skill",
    "read_skill_resource",
    "render_loaded_skill",
    "render_skill_catalog",
    "resolve_catalog",
    "split_skill_command",
]
