"""Skill folders on disk for the skills tests."""

from __future__ import annotations

from pathlib import Path

from tether.agents.skills import Skill


def write_skill(
    root: Path, folder: str, name: str | None = None, description: str = "Does things", **files: str
) -> Path:
    """``root/folder/SKILL.md`` (named ``name``, default the folder) plus ``files`` (``__`` in a
    keyword stands for ``/``, ``_`` before the extension for ``.``: ``scripts__x_py``)."""
    skill_dir = root / folder
    skill_dir.mkdir(parents=True, exist_ok=True)
    body = files.pop("body", f"How to use {name or folder}.")
    front = f"---\nname: {name or folder}\ndescription: {description}\n---\n{body}\n"
    (skill_dir / "SKILL.md").write_text(front)
    for key, text in files.items():
        relative = key.replace("__", "/")
        stem, _, ext = relative.rpartition("_")
        path = skill_dir / f"{stem}.{ext}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return skill_dir


def skill(name: str, source: str = "bundle-global", directory: str = "/x", **kw: object) -> Skill:
    return Skill(
        name=name,
        description=str(kw.pop("description", f"About {name}")),
        body=str(kw.pop("body", f"Body of {name}")),
        directory=Path(directory),
        source=source,  # type: ignore[arg-type]
        files=tuple(kw.pop("files", ())),  # type: ignore[arg-type]
        allowed_tools=kw.pop("allowed_tools", None),  # type: ignore[arg-type]
    )
