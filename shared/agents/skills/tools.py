"""The built-in skill tools, ``load_skill`` and ``read_skill_file`` (spec §6.5).

Both are ``read`` tools (never gated) bound to one agent's catalog. They run like any tool
call, so their result is the call's durable step: a replay returns what the first attempt read.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tether.agents.errors import ToolError
from tether.agents.skills.catalog import SkillCatalog
from tether.agents.skills.parse import Skill
from tether.agents.skills.render import render_loaded_skill
from tether.agents.skills.resource import read_skill_resource
from tether.agents.tools import FunctionTool, schema_tool

LOAD_SKILL = "load_skill"
READ_SKILL_FILE = "read_skill_file"

_LOAD_DESCRIPTION = (
    "Load the full instructions for one of the available skills by name. Call this before "
    "acting on a task that matches a skill's description. Returns the skill's instructions "
    "plus a list of any bundled files you can read with read_skill_file."
)
_READ_DESCRIPTION = (
    "Read a bundled resource file that a loaded skill references (e.g. a reference doc). Only "
    "files listed by load_skill for that skill are readable."
)
_SKILL_PARAM = {
    "type": "string",
    "description": "The exact skill name to load, as shown in the available-skills list.",
}


def _text_argument(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    return value.strip() if isinstance(value, str) else ""


def _skill(catalog: SkillCatalog, tool: str, args: dict[str, Any]) -> Skill:
    name = _text_argument(args, "skill")
    if not name:
        raise ToolError(f"'{tool}' requires a 'skill' argument naming the skill to use.")
    return catalog.resolve(name)


def read_listed_file(skill: Skill, path: str) -> str:
    """A file of ``skill``, if ``load_skill`` lists it (exactly) and the guard lets it be read."""
    if path not in skill.files:
        available = ", ".join(skill.files) or "<none>"
        raise ToolError(
            f"Skill '{skill.name}' has no bundled file '{path}'. Available: {available}."
        )
    return read_skill_resource(skill.directory, path)


def skill_tools(catalog: SkillCatalog) -> dict[str, FunctionTool]:
    """The two built-ins for an agent with this catalog."""

    async def load(args: dict[str, Any]) -> str:
        return render_loaded_skill(_skill(catalog, LOAD_SKILL, args))

    async def read(args: dict[str, Any]) -> str:
        skill = _skill(catalog, READ_SKILL_FILE, args)
        path = _text_argument(args, "path")
        if not path:
            raise ToolError(f"'{READ_SKILL_FILE}' requires a 'path' argument.")
        return await asyncio.to_thread(read_listed_file, skill, path)

    load_tool = schema_tool(
        LOAD_SKILL,
        _LOAD_DESCRIPTION,
        {"type": "object", "properties": {"skill": _SKILL_PARAM}, "required": ["skill"]},
        load,
        effect="read",
    )
    read_tool = schema_tool(
        READ_SKILL_FILE,
        _READ_DESCRIPTION,
        {
            "type": "object",
            "properties": {
                "skill": {"type": "string", "description": "The skill that owns the file."},
                "path": {
                    "type": "string",
                    "description": "Relative path of the file within the skill, as listed by "
                    "load_skill.",
                },
            },
            "required": ["skill", "path"],
        },
        read,
        effect="read",
    )
    return {LOAD_SKILL: load_tool, READ_SKILL_FILE: read_tool}
