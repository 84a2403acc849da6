"""Finding skills on disk: every ``<dir>/<name>/SKILL.md``, and the files each one bundles."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from tether.agents.errors import read_definition
from tether.agents.skills.parse import Skill, SkillSource, parse_skill

log = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"
MAX_FILES = 1000
"""A skill bundling more files lists only this many (sorted) and says so in the log."""


def bundled_files(root: Path) -> tuple[str, ...]:
    """Regular files under ``root`` as sorted relative POSIX paths, ``SKILL.md`` at the top
    excluded. Symbolic links are neither files nor folders here: never listed, never followed.
    Hidden entries (``.git/``, ``.env``, ``.DS_Store``) are skipped like hidden skill folders:
    they are not the skill's resources, may hold secrets, and would crowd its files out of the
    listing's cap (a dot sorts before letters)."""
    found: list[str] = []

    def walk(folder: Path, prefix: str) -> None:
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if len(found) >= MAX_FILES:
                    return
                if entry.is_symlink() or entry.name.startswith("."):
                    continue
                relative = f"{prefix}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    walk(Path(entry.path), relative + "/")
                elif entry.is_file(follow_symlinks=False) and relative != SKILL_FILE:
                    found.append(relative)

    walk(root, "")
    if len(found) >= MAX_FILES:
        log.warning(
            "Skill folder %s bundles more than %d files; listing the first", root, MAX_FILES
        )
    return tuple(found)


def load_skill(folder: Path, source: SkillSource) -> Skill:
    """The skill in ``folder`` (which holds ``SKILL.md``); read or parse errors raise."""
    path = folder / SKILL_FILE
    text = read_definition(path, "skill file")
    parsed = parse_skill(text, path)
    return Skill(
        name=parsed.name,
        description=parsed.description,
        body=parsed.body,
        directory=folder,
        source=source,
        files=bundled_files(folder),
        allowed_tools=parsed.allowed_tools,
        license=parsed.license,
    )


def load_skills_dir(directory: str | Path | None, source: SkillSource) -> list[Skill]:
    """Every skill in ``directory`` (sub-folders in sorted order); a missing folder has none.

    A sub-folder without ``SKILL.md`` is skipped with a warning; a file that cannot be read or
    parsed raises, so a broken skill stops the boot instead of vanishing quietly.
    """
    if directory is None:
        return []
    root = Path(directory)
    if not root.is_dir():
        return []
    skills = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if folder.name.startswith("."):
            continue
        if folder.is_symlink():
            log.warning(
                "Skipping %s: a skill folder that is a symbolic link is not followed", folder
            )
            continue
        if not (folder / SKILL_FILE).is_file():
            log.warning("Skipping %s: no %s", folder, SKILL_FILE)
            continue
        skills.append(load_skill(folder, source))
    return skills
