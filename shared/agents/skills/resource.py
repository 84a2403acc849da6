"""Reading one file a skill bundles, never anything outside the skill's folder (spec §6.5).

The guard refuses NUL bytes, over-long and absolute paths and any ``..`` segment (split on
``/`` and ``\\``), then resolves both the folder and the file with every symbolic link followed
(``os.path.realpath``) and requires the file to be inside the folder: a link cannot lead out.
Messages name the relative path only, never where the folder is on this machine.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path, PurePosixPath, PureWindowsPath

from tether.agents.errors import MAX_DEFINITION_BYTES, ToolError

MAX_PATH_CHARS = 4096
MAX_FILE_BYTES = MAX_DEFINITION_BYTES  # a bundled file goes to the model whole, as SKILL.md


class SkillFileError(ToolError):
    """A skill file that may not, or cannot, be read; the message is safe for the model."""


def _check_relative(rel: str) -> None:
    if "\x00" in rel:
        raise SkillFileError("Path must not contain null bytes.")
    if len(rel) > MAX_PATH_CHARS:
        raise SkillFileError(f"Path is too long (more than {MAX_PATH_CHARS} characters).")
    if PurePosixPath(rel).is_absolute() or PureWindowsPath(rel).is_absolute() or rel[:1] in "/\\":
        raise SkillFileError("Path must be relative to the skill directory.")
    if PureWindowsPath(rel).drive:
        raise SkillFileError("Path must be relative to the skill directory.")
    if ".." in re.split(r"[\\/]", rel):
        raise SkillFileError('Path traversal ("../") is not allowed.')


def _contained(base_dir: Path, rel: str) -> str:
    root = os.path.realpath(base_dir)
    target = os.path.realpath(os.path.join(root, rel))
    if target != root and not target.startswith(root + os.sep):
        raise SkillFileError("Resolved path escapes the skill directory.")
    return target


def read_skill_resource(base_dir: Path | str, rel: str, max_size: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of ``rel`` inside ``base_dir``; raises :class:`SkillFileError`."""
    _check_relative(rel)
    target = _contained(Path(base_dir), rel)
    try:
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(target, flags)  # a FIFO must not block the read
    except OSError:
        raise SkillFileError(f"Skill file '{rel}' is not a file.") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise SkillFileError(f"Skill file '{rel}' is not a file.")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > max_size:
            raise SkillFileError(f"Skill file '{rel}' exceeds the {max_size}-byte read limit.")
        data = handle.read(max_size + 1)
    if len(data) > max_size:
        raise SkillFileError(f"Skill file '{rel}' exceeds the {max_size}-byte read limit.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillFileError(f"Skill file '{rel}' is not UTF-8 text.") from None
