"""``tether dev --agents DIR``: the composition root builds the agents with their skills folder
and MCP host policy from the settings (and ``--skills``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.skill_fixtures import write_skill
from tether.app import AppLoadError
from tether.cli import agent_app_for, parse_args, settings_from
from tether.settings import load_settings


def agents_dir(tmp_path: Path, front: str) -> Path:
    folder = tmp_path / "agents"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "agent.md").write_text(f"---\nmodel: scripted\n{front}---\nA.")
    return folder


def test_skills_flag_and_setting_reach_the_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_skill(tmp_path / "library", "shared")
    folder = agents_dir(tmp_path, "skills: [shared]\n")
    args = parse_args(["dev", "--agents", str(folder), "--skills", str(tmp_path / "library")])
    settings = settings_from(args, agents={"skills_dir": args.skills})
    assert settings.agents.skills_dir == str(tmp_path / "library")
    assert agent_app_for(settings, str(folder)).invoke_handler is not None
    monkeypatch.setenv("TETHER_AGENTS__SKILLS_DIR", str(tmp_path / "missing"))
    with pytest.raises(AppLoadError, match="is not a folder"):
        agent_app_for(load_settings(None), str(folder))


def test_skills_without_agents_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was ignored in silence: the default app served and the skills were never read."""
    from tether.cli import main

    assert main(["dev", "--skills", str(tmp_path), "--db", str(tmp_path / "t.db")]) == 2
    assert "--skills is for --agents' agents" in capsys.readouterr().err
    assert not (tmp_path / "t.db").exists()


def test_dev_admits_loopback_and_the_trusted_hosts_and_refuses_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loopback = agents_dir(tmp_path / "one", "mcp: {dev: 'http://127.0.0.1:9/mcp'}\n")
    assert agent_app_for(load_settings(None), str(loopback)) is not None
    remote = agents_dir(tmp_path / "two", "mcp: {ext: 'https://mcp.example.com/mcp'}\n")
    with pytest.raises(AppLoadError, match="MCP host 'mcp.example.com' is not allowed"):
        agent_app_for(load_settings(None), str(remote))
    monkeypatch.setenv("TETHER_AGENTS__MCP_TRUSTED_HOSTS", "mcp.example.com, other.example.com")
    settings = load_settings(None)
    assert settings.agents.mcp_trusted_hosts == ["mcp.example.com", "other.example.com"]
    assert agent_app_for(settings, str(remote)) is not None
