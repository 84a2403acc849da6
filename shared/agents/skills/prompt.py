"""The skills part of an agent's system prompt, recorded once per run.

The catalog (and a forced skill's instructions) come from files read at boot; a replacement
attempt in a process that booted after a skill changed must still show the model what the first
attempt showed it, so the text is a durable step (``<agent>#prompt``). An agent with no skill
records nothing.
"""

from __future__ import annotations

from typing import Any

from tether.agents.skills.catalog import SkillCatalog
from tether.agents.skills.forcing import forced_skill_addendum
from tether.agents.skills.render import render_skill_catalog
from tether.agents.steps import StepLog


def skills_prompt(agent: str, catalog: SkillCatalog | None, forced: str | None) -> str:
    """The catalog block, then the forced skill's addendum (if it resolves; a forced skill that
    does not, or an agent without skills, is logged and ignored)."""
    addendum = forced_skill_addendum(agent, catalog, forced) if forced is not None else None
    if catalog is None:
        return ""
    parts = [render_skill_catalog(catalog)]
    if addendum is not None:
        parts.append(addendum)
    return "\n\n".join(parts)


async def recorded_skills_prompt(
    agent: str, catalog: SkillCatalog | None, forced: str | None, steps: StepLog, step: str
) -> str:
    """:func:`skills_prompt`, as the run's durable step ``step`` (none without a catalog)."""
    if catalog is None:
        return skills_prompt(agent, catalog, forced)

    async def build() -> dict[str, Any]:
        return {"text": skills_prompt(agent, catalog, forced)}

    recorded = await steps.step(step, build)
    return str(recorded.get("text") or "") if isinstance(recorded, dict) else ""
