"""QA regressions for the MCP host policy and Agent Skills (spec §5, §6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.skill_fixtures import write_skill
from tether.agents import ToolError
from tether.agents.skills import load_skills_dir, resolve_catalog
from tether.agents.skills.tools import READ_SKILL_FILE, skill_tools


def test_hidden_files_and_vcs_folders_are_not_bundled(tmp_path: Path) -> None:
    """A skill cloned with git (``.git/``) or holding a ``.env`` must not offer those to the
    model, and they must not crowd the skill's own files out of the listing cap."""
    folder = write_skill(tmp_path / "skills", "pdf", reference_md="# Reference")
    (folder / ".env").write_text("TOKEN=s3cret")
    objects = folder / ".git" / "objects" / "ab"
    objects.mkdir(parents=True)
    for i in range(1001):
        (objects / f"{i:038x}").write_text("blob")
    (folder / ".git" / "config").write_text("url = https://user:ghp_token@github.com/x/y")
    [found] = load_skills_dir(folder.parent, "library")
    assert found.files == ("reference.md",)


async def test_a_hidden_file_cannot_be_read_through_read_skill_file(tmp_path: Path) -> None:
    folder = write_skill(tmp_path / "skills", "pdf", reference_md="# Reference")
    (folder / ".env").write_text("TOKEN=s3cret")
    [found] = load_skills_dir(folder.parent, "library")
    catalog = resolve_catalog("a", [found], [])
    assert catalog is not None
    read = skill_tools(catalog)[READ_SKILL_FILE]
    with pytest.raises(ToolError, match="has no bundled file"):
        await read.call({"skill": "pdf", "path": ".env"})
