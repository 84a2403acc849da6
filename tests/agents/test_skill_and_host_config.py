"""Skill folders and the MCP host policy as users lay them out and configure them: hidden files,
byte order marks, linked folders, trusted hosts written as URLs (spec §5, §6)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.agents.skill_fixtures import write_skill
from tether.agents import ToolError
from tether.agents.mcp import McpConfig, McpHub, McpPolicyError, build_policy, check_mcp_url
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


def test_trusted_hosts_given_as_one_string_is_a_clear_error() -> None:
    """``McpConfig(trusted_hosts="mcp.example.com")`` trusted the hosts 'm', 'c', 'p', …"""
    with pytest.raises(McpPolicyError, match="list of host names"):
        McpHub(McpConfig(trusted_hosts="mcp.example.com"))


@pytest.mark.parametrize(
    "entry", ["https://mcp.example.com", "mcp.example.com:8443", "mcp.example.com/mcp"]
)
def test_a_trusted_host_that_could_never_match_is_a_clear_error(entry: str) -> None:
    with pytest.raises(McpPolicyError, match="bare host name"):
        build_policy([entry])


def test_a_bracketed_ipv6_trusted_host_matches_its_url() -> None:
    trusted = build_policy(["[2001:db8::1]", "2001:DB8::2"])
    assert check_mcp_url("https://[2001:db8::1]/mcp", trusted).forward_auth is False
    assert check_mcp_url("https://[2001:db8::2]/mcp", trusted).forward_auth is False


def test_an_invalid_databricks_host_is_ignored_but_bad_trusted_hosts_still_raise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABRICKS_HOST", "https://")
    assert McpHub(McpConfig(trusted_hosts=["mcp.example.com"])).policy.workspace_hostname is None
    with pytest.raises(McpPolicyError, match="bare host name"):
        McpHub(McpConfig(trusted_hosts=["https://mcp.example.com"]))


def test_a_skill_file_saved_with_a_byte_order_mark_parses(tmp_path: Path) -> None:
    """Editors on Windows save UTF-8 with a BOM; the file was refused as having no front
    matter although it plainly has one."""
    folder = tmp_path / "skills" / "pdf"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_bytes(b"\xef\xbb\xbf---\nname: pdf\ndescription: d\n---\nBody")
    [found] = load_skills_dir(folder.parent, "library")
    assert (found.name, found.body) == ("pdf", "Body")


def test_a_symlinked_skill_folder_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    real = write_skill(tmp_path / "elsewhere", "pdf")
    (tmp_path / "skills").mkdir()
    os.symlink(real, tmp_path / "skills" / "pdf")
    assert load_skills_dir(tmp_path / "skills", "library") == []
    assert "symbolic link" in caplog.text


def test_a_skill_or_agent_file_past_the_size_cap_is_refused_by_name(tmp_path: Path) -> None:
    """Its text goes to the model whole: one past the cap bundled files have is refused when
    the agents load, not read into memory whole and sent."""
    from tether.agents import DefinitionError, load_agents_dir
    from tether.agents.errors import MAX_DEFINITION_BYTES

    folder = tmp_path / "skills" / "pdf"
    folder.mkdir(parents=True)
    head = b"---\nname: pdf\ndescription: d\n---\n"
    (folder / "SKILL.md").write_bytes(head + b"x" * MAX_DEFINITION_BYTES)
    with pytest.raises(DefinitionError, match="SKILL.md: over 1,000,000 bytes"):
        load_skills_dir(folder.parent, "library")
    agent = tmp_path / "agents" / "a"
    agent.mkdir(parents=True)
    (agent / "agent.md").write_bytes(b"---\nmodel: scripted\n---\n" + b"x" * MAX_DEFINITION_BYTES)
    with pytest.raises(DefinitionError, match="agent.md: over 1,000,000 bytes"):
        load_agents_dir(agent.parent)


@pytest.mark.parametrize(
    "front, body",
    [
        ('description: "Fill\\0 PDFs"', "Body"),  # a YAML escape
        ("description: Fill PDFs", "Body \x00 here"),
        ('description: "Fill \\ud800 PDFs"', "Body"),  # a lone surrogate
        ('description: d\nallowed-tools: "read, gr\\0ep"', "Body"),
    ],
)
def test_a_skill_text_no_store_can_hold_stops_the_load(
    tmp_path: Path, front: str, body: str
) -> None:
    """The catalog and a forced skill's instructions are the run's ``<agent>#prompt`` step: a
    NUL or a lone surrogate in them made every run of every agent that saw the skill fail
    (``InvalidJson``), although the agents loaded fine. It is refused at load, by file."""
    from tether.agents import DefinitionError

    folder = tmp_path / "skills" / "pdf"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: pdf\n{front}\n---\n{body}", "utf-8")
    with pytest.raises(DefinitionError, match="SKILL.md.*NUL character or a lone surrogate"):
        load_skills_dir(folder.parent, "library")
