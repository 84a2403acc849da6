"""One ``SKILL.md``: Anthropic-format front matter (``name``, ``description``) and a body."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from tether.agents.errors import DefinitionError
from tether.agents.markdown import FENCE, load_yaml
from tether.jsonvalue import storable_text

log = logging.getLogger(__name__)

SkillSource = Literal["bundle-agent", "bundle-global", "library"]
SCOPES: Mapping[SkillSource, str] = {
    "bundle-agent": "agent",
    "bundle-global": "bundle",
    "library": "library",
}
"""Where a skill comes from → the prefix of its qualified address (``agent:pdf``)."""

SKILL_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*\Z")
MAX_NAME = 64
OPTIONAL_KEYS = frozenset({"license", "allowed-tools", "metadata"})


@dataclass(frozen=True, slots=True)
class Skill:
    """A loaded skill. ``files`` are the regular files it bundles (relative POSIX paths, sorted,
    ``SKILL.md`` excluded); ``allowed_tools`` is advisory, shown to the model, never enforced."""

    name: str
    description: str
    body: str
    directory: Path
    source: SkillSource
    files: tuple[str, ...] = ()
    allowed_tools: tuple[str, ...] | None = None
    license: str | None = None

    @property
    def qualified(self) -> str:
        return f"{SCOPES[self.source]}:{self.name}"


@dataclass(frozen=True, slots=True)
class SkillText:
    """What ``SKILL.md`` itself says."""

    name: str
    description: str
    body: str
    allowed_tools: tuple[str, ...] | None = None
    license: str | None = None


def _front_matter(text: str, path: Path | str) -> tuple[dict[str, Any], str]:
    match = FENCE.match(text)
    if match is None:
        raise DefinitionError(
            f"Skill file {path} has no YAML frontmatter (expected '--- name/description ---')."
        )
    try:
        data = load_yaml(match.group(1))
    except yaml.YAMLError as exc:
        raise DefinitionError(f"Invalid YAML frontmatter in {path}: {exc}") from None
    if not isinstance(data, dict):
        raise DefinitionError(f"Frontmatter of skill file {path} must be a YAML object.")
    return data, match.group(2).strip()


def _allowed_tools(value: Any, path: Path | str) -> tuple[str, ...] | None:
    """A list of names or one comma-separated string; empties dropped; nothing left → None."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        parts = value
    else:
        log.warning("Ignoring 'allowed-tools' in %s: expected a list or a string", path)
        return None
    names = tuple(p.strip() for p in parts if p.strip())
    return names or None


def _required(fm: Mapping[str, Any], key: str, path: Path | str) -> str:
    value = fm.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DefinitionError(f"Skill file {path} is missing a non-empty '{key}'.")
    return value.strip()


def parse_skill(text: str, path: Path | str) -> SkillText:
    """Parse ``SKILL.md`` text; raises :class:`DefinitionError` naming ``path``."""
    fm, body = _front_matter(text, path)
    name = _required(fm, "name", path)
    if not SKILL_NAME.match(name) or len(name) > MAX_NAME:
        raise DefinitionError(
            f"Skill file {path} has an invalid name: use letters, digits, '.', '_', '-' only "
            f"(at most {MAX_NAME}, no ':' or '/' or spaces)."
        )
    description = _required(fm, "description", path)
    for key in fm:
        if key not in {"name", "description", *OPTIONAL_KEYS}:
            log.warning("Ignoring unknown SKILL.md frontmatter key '%s' in %s", key, path)
    license_ = fm.get("license")
    parsed = SkillText(
        name=name,
        description=description,
        body=body,
        allowed_tools=_allowed_tools(fm.get("allowed-tools"), path),
        license=license_ if isinstance(license_, str) else None,
    )
    texts = [description, body, *(parsed.allowed_tools or ())]
    if not all(storable_text(t) for t in texts):  # the runs' prompt step could not hold it
        raise DefinitionError(
            f"Skill file {path} holds a NUL character or a lone surrogate, which no run could "
            "record."
        )
    return parsed
