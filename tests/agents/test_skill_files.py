"""Reading a skill's bundled files: the containment guard and the allowlist (spec §6.7, cases
K14-K17, and the port's symlink case)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.agents.skill_fixtures import write_skill
from tether.agents import ToolError
from tether.agents.skills import load_skills_dir, read_skill_resource, resolve_catalog
from tether.agents.skills.resource import SkillFileError
from tether.agents.skills.tools import READ_SKILL_FILE, skill_tools


@pytest.fixture
def skill_dir(tmp_path: Path) -> Path:
    (tmp_path / "secret.txt").write_text("the secret")
    return write_skill(tmp_path / "skills", "pdf", reference_md="# Reference", big_txt="x" * 50)


def test_a_bundled_file_is_read(skill_dir: Path) -> None:  # K14
    assert read_skill_resource(skill_dir, "reference.md") == "# Reference"


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("../secret.txt", "traversal"),
        ("a/../../secret.txt", "traversal"),
        ("a\\..\\..\\x", "traversal"),
        ("/etc/passwd", "relative"),
        ("\\\\server\\share", "relative"),
        ("C:\\Windows\\win.ini", "relative"),
        ("x\x00", "null bytes"),
        ("a" * 4097, "too long"),
        ("missing.md", "not a file"),
        (".", "not a file"),
    ],
)
def test_the_guard_refuses_paths_that_leave_or_are_not_files(
    skill_dir: Path, path: str, error: str
) -> None:  # K15
    with pytest.raises(SkillFileError, match=error) as refused:
        read_skill_resource(skill_dir, path)
    assert str(skill_dir) not in str(refused.value)  # no absolute path of this machine


def test_a_file_over_the_size_cap_is_refused(skill_dir: Path) -> None:  # K15
    with pytest.raises(SkillFileError, match="10-byte read limit"):
        read_skill_resource(skill_dir, "big.txt", max_size=10)


def test_a_symlink_out_of_the_folder_is_never_listed_nor_read(skill_dir: Path) -> None:  # K16
    os.symlink(skill_dir.parents[1] / "secret.txt", skill_dir / "leak.txt")
    os.symlink(skill_dir.parents[1], skill_dir / "up")
    [found] = load_skills_dir(skill_dir.parent, "library")
    assert "leak.txt" not in found.files and not any(f.startswith("up/") for f in found.files)
    for path in ("leak.txt", "up/secret.txt"):
        with pytest.raises(SkillFileError, match="escapes the skill directory"):
            read_skill_resource(skill_dir, path)


def test_a_fifo_is_refused_without_blocking(skill_dir: Path) -> None:
    os.mkfifo(skill_dir / "pipe")
    with pytest.raises(SkillFileError, match="not a file"):
        read_skill_resource(skill_dir, "pipe")


async def test_read_skill_file_reads_only_what_load_skill_lists(skill_dir: Path) -> None:  # K17
    (skill_dir / "late.md").write_text("added after the load")
    [found] = load_skills_dir(skill_dir.parent, "library")
    (skill_dir / "after.md").write_text("not listed")
    catalog = resolve_catalog("a", [found], [], None)
    assert catalog is not None
    read = skill_tools(catalog)[READ_SKILL_FILE]
    assert await read.call({"skill": "pdf", "path": "reference.md"}) == "# Reference"
    with pytest.raises(ToolError, match="has no bundled file 'after.md'. Available: big.txt"):
        await read.call({"skill": "pdf", "path": "after.md"})
    with pytest.raises(ToolError, match="requires a 'path' argument"):
        await read.call({"skill": "pdf", "path": "  "})
    with pytest.raises(ToolError, match="requires a 'skill' argument"):
        await read.call({"skill": "", "path": "reference.md"})
