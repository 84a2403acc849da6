"""What the model reads of skills: the catalog in the system prompt and a loaded skill."""

from __future__ import annotations

from tether.agents.skills.catalog import SkillCatalog
from tether.agents.skills.parse import Skill

CATALOG_HEADER = (
    "## Available skills\n"
    "When a task matches one of these skills, call the `load_skill` tool with the skill's exact "
    "name to load its full instructions before proceeding."
)


def render_skill_catalog(catalog: SkillCatalog) -> str:
    """The block appended to the system prompt (spec §6.4): a line per skill, its description's
    line breaks and runs of spaces made one space (a YAML block description spans lines, and
    its later lines would read as text outside the list)."""
    lines = [
        f"- **{entry['name']}**: {' '.join(entry['description'].split())}"
        for entry in catalog.listing()
    ]
    return "\n".join([CATALOG_HEADER, "", *lines])


def render_loaded_skill(skill: Skill) -> str:
    """``load_skill``'s result: the body, the bundled files, the suggested tools (spec §6.5)."""
    parts = [f"# Skill: {skill.name}", "", skill.body]
    if skill.files:
        parts += [
            "",
            "## Bundled files",
            "Read any of these with the `read_skill_file` tool (pass this skill's name and the "
            "file path):",
            *(f"- {path}" for path in skill.files),
        ]
    if skill.allowed_tools:
        parts += ["", f"_Suggested tools for this skill: {', '.join(skill.allowed_tools)}._"]
    return "\n".join(parts)
