"""Agent Skills: SKILL.md, discovery, visibility and collisions, rendering, forcing (spec §6.7,
cases K1-K13 and K18-K21)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.agents.skill_fixtures import skill, write_skill
from tether.agents import DefinitionError, ScriptedModel, ToolError, create_agent, load_agents_dir
from tether.agents.registry import tool_index
from tether.agents.skills import (
    SkillCatalog,
    forced_skill_addendum,
    load_skills_dir,
    parse_skill,
    render_loaded_skill,
    render_skill_catalog,
    resolve_catalog,
    split_skill_command,
)
from tether.agents.skills.forcing import choose_skill
from tether.agents.types import Message

PDF = "---\nname: pdf\ndescription: Work with PDFs\n---\nHow to work with PDFs."


def test_a_skill_file_gives_name_description_and_body() -> None:  # K1
    parsed = parse_skill(PDF, "SKILL.md")
    assert (parsed.name, parsed.description) == ("pdf", "Work with PDFs")
    assert parsed.body == "How to work with PDFs." and parsed.allowed_tools is None


@pytest.mark.parametrize("value", ["[read, grep]", '"read, grep"', '"read, , grep ,"'])
def test_allowed_tools_is_a_list_or_a_comma_separated_string(value: str) -> None:  # K2
    text = f"---\nname: pdf\ndescription: d\nallowed-tools: {value}\n---\nbody"
    assert parse_skill(text, "p").allowed_tools == ("read", "grep")


def test_allowed_tools_of_the_wrong_type_is_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = "---\nname: pdf\ndescription: d\nallowed-tools: 3\n---\nbody"
    assert parse_skill(text, "p").allowed_tools is None
    assert "allowed-tools" in caplog.text


@pytest.mark.parametrize(
    ("front", "error"),
    [
        ("name: pdf", "missing a non-empty 'description'"),
        ("description: d", "missing a non-empty 'name'"),
        ("name: '  '\ndescription: d", "missing a non-empty 'name'"),
    ],
)
def test_name_and_description_are_required(front: str, error: str) -> None:  # K3
    with pytest.raises(DefinitionError, match=error):
        parse_skill(f"---\n{front}\n---\nbody", "p")


@pytest.mark.parametrize("name", ["bad:name", "a/b", '"a b"', "-lead", "x" * 65])
def test_a_name_with_other_characters_is_invalid(name: str) -> None:  # K4
    with pytest.raises(DefinitionError, match="invalid name"):
        parse_skill(f"---\nname: {name}\ndescription: d\n---\nbody", "p")


def test_a_file_without_front_matter_is_refused() -> None:  # K5
    with pytest.raises(DefinitionError, match="no YAML frontmatter"):
        parse_skill("no frontmatter here", "p")
    with pytest.raises(DefinitionError, match="Invalid YAML frontmatter"):
        parse_skill("---\nname: [\n---\nbody", "p")
    with pytest.raises(DefinitionError, match="must be a YAML object"):
        parse_skill("---\n- a\n---\nbody", "p")


def test_an_unknown_key_warns_and_parses(caplog: pytest.LogCaptureFixture) -> None:  # K6
    text = "---\nname: pdf\ndescription: d\nbananas: 3\nlicense: MIT\n---\nbody"
    assert parse_skill(text, "p").license == "MIT"
    assert "Ignoring unknown SKILL.md frontmatter key 'bananas'" in caplog.text


def test_discovery_lists_bundled_files_and_skips_folders_without_skill_md(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # K7
    assert load_skills_dir(tmp_path / "missing", "library") == []
    write_skill(tmp_path, "pdf", reference_md="ref", scripts__extract_py="print()")
    (tmp_path / "empty").mkdir()
    with caplog.at_level(logging.WARNING):
        [found] = load_skills_dir(tmp_path, "library")
    assert found.files == ("reference.md", "scripts/extract.py")
    assert found.source == "library" and found.directory == tmp_path / "pdf"
    assert "no SKILL.md" in caplog.text


def test_a_broken_skill_file_stops_the_load(tmp_path: Path) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "SKILL.md").write_text("no front matter")
    with pytest.raises(DefinitionError, match="no YAML frontmatter"):
        load_skills_dir(tmp_path, "library")


def addresses(catalog: SkillCatalog | None) -> set[str]:
    assert catalog is not None
    return set(catalog.entries)


def test_an_agent_sees_its_own_skills_and_the_shared_ones_it_names(
    caplog: pytest.LogCaptureFixture,
) -> None:  # K8
    local = [skill("local", "bundle-agent")]
    shared = [skill("wanted"), skill("unwanted", "library")]
    assert addresses(resolve_catalog("a", local, shared, ["wanted"])) == {"local", "wanted"}
    everything = resolve_catalog("a", local, shared, None, auto_inherit=True)
    assert addresses(everything) == {"local", "wanted", "unwanted"}
    assert addresses(resolve_catalog("a", local, shared, ["ghost"])) == {"local"}
    assert "'ghost', which was found nowhere" in caplog.text
    assert resolve_catalog("a", [], shared, None) is None


def test_one_name_from_several_sources_is_addressed_by_scope() -> None:  # K9
    dup = [skill("dup", "bundle-agent"), skill("dup"), skill("dup", "library")]
    catalog = resolve_catalog("a", dup[:1], dup[1:], None, auto_inherit=True)
    assert addresses(catalog) == {"agent:dup", "bundle:dup", "library:dup"}
    assert catalog is not None
    assert catalog.ambiguous == {"dup": ["agent:dup", "bundle:dup", "library:dup"]}


def test_one_name_twice_in_one_source_is_an_error() -> None:  # K10
    twins = [skill("dup", directory="/a"), skill("dup", directory="/b")]
    with pytest.raises(DefinitionError, match="unique within a source"):
        resolve_catalog("a", [], twins, None, auto_inherit=True)


def test_resolving_bare_qualified_ambiguous_and_unknown_names() -> None:  # K11
    catalog = resolve_catalog(
        "a", [], [skill("solo"), skill("dup"), skill("dup", "library")], None, auto_inherit=True
    )
    assert catalog is not None
    assert catalog.resolve("solo").name == "solo"
    assert catalog.resolve("library:dup").source == "library"
    with pytest.raises(ToolError, match="ambiguous.*bundle:dup.*library:dup"):
        catalog.resolve("dup")
    with pytest.raises(ToolError, match="Unknown skill 'missing'. Available: bundle:dup"):
        catalog.resolve("missing")


def test_the_catalog_block_lists_each_skill_and_says_to_load_it() -> None:  # K12
    catalog = resolve_catalog(
        "a",
        [],
        [skill("pdf", description="Work with PDFs"), skill("sql", description="Write SQL")],
        ["pdf", "sql"],
    )
    assert catalog is not None
    text = render_skill_catalog(catalog)
    assert text.startswith("## Available skills\n") and "`load_skill`" in text
    assert "- **pdf**: Work with PDFs" in text and "- **sql**: Write SQL" in text


def test_a_description_over_several_lines_is_one_line_of_the_catalog() -> None:
    described = "Work with PDFs:\n  fill forms,\n\n- merge files\n"  # a YAML block's text
    catalog = resolve_catalog("a", [], [skill("pdf", description=described)], ["pdf"])
    assert catalog is not None
    *_, last = render_skill_catalog(catalog).split("\n")
    assert last == "- **pdf**: Work with PDFs: fill forms, - merge files"
    assert catalog.listing()[0]["description"] == described  # clients get it as written


def test_a_loaded_skill_lists_its_files_and_suggested_tools() -> None:  # K13
    full = skill("pdf", files=["reference.md", "scripts/x.py"], allowed_tools=("read", "grep"))
    text = render_loaded_skill(full)
    assert text.startswith("# Skill: pdf\n\nBody of pdf")
    assert "read_skill_file" in text and "- reference.md" in text and "- scripts/x.py" in text
    assert "_Suggested tools for this skill: read, grep._" in text
    assert "Bundled files" not in render_loaded_skill(skill("pdf"))


def test_only_an_agent_that_sees_a_skill_gets_the_skill_tools(tmp_path: Path) -> None:  # K18
    write_skill(tmp_path / "helper" / "skills", "pdf", description="PDFs")
    (tmp_path / "helper" / "agent.md").write_text("---\nmodel: scripted\n---\nHelp.")
    (tmp_path / "plain" / "agent.md").parent.mkdir()
    (tmp_path / "plain" / "agent.md").write_text("---\nmodel: scripted\n---\nPlain.")
    registry = load_agents_dir(tmp_path)
    helper, plain = registry.get("helper"), registry.get("plain")
    assert {"load_skill", "read_skill_file"} <= set(tool_index(helper))
    assert plain.skills is None and "load_skill" not in tool_index(plain)
    annotations = tool_index(helper)["load_skill"].definition.annotations
    assert annotations is not None and annotations.effect == "read"
    assert registry.skills_info() == {  # K19: what clients list
        "helper": [{"name": "pdf", "description": "PDFs"}]
    }


def test_skill_tools_shadow_a_tool_of_the_same_name(tmp_path: Path) -> None:
    from tether.agents import tool

    @tool
    def load_skill(skill: str) -> str:
        """An impostor."""
        return "impostor"

    write_skill(tmp_path / "skills", "pdf")
    code = create_agent("c", model=ScriptedModel.of("hi"), tools=[load_skill], skills=["pdf"])
    registry = load_agents_dir(tmp_path, code_agents=[code])
    assert tool_index(registry.get("c"))["load_skill"].tool is not load_skill


def test_skills_come_from_the_agents_folder_and_the_configured_folder(tmp_path: Path) -> None:
    agents, library = tmp_path / "agents", tmp_path / "library"
    write_skill(agents / "skills", "bundled")
    write_skill(library, "shared")
    write_skill(library, "unused")
    (agents / "a").mkdir()
    (agents / "a" / "agent.md").write_text(
        "---\nmodel: scripted\nskills: [bundled, shared]\n---\nA."
    )
    registry = load_agents_dir(agents, skills_dir=library)
    assert addresses(registry.get("a").skills) == {"bundled", "shared"}
    everything = load_agents_dir(agents, skills_dir=library, auto_inherit_skills=True)
    assert addresses(everything.get("a").skills) == {"bundled", "shared", "unused"}


def test_a_malformed_skills_entry_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "agent.md").write_text("---\nskills: pdf\n---\nA.")
    with pytest.raises(DefinitionError, match="'skills' must be a list"):
        load_agents_dir(tmp_path)


def test_a_forced_skill_adds_its_instructions(caplog: pytest.LogCaptureFixture) -> None:  # K20
    catalog = resolve_catalog("a", [skill("pdf", "bundle-agent")], [], None)
    addendum = forced_skill_addendum("a", catalog, "pdf")
    assert addendum is not None
    assert 'explicitly requested the "pdf" skill' in addendum and "Body of pdf" in addendum
    assert forced_skill_addendum("a", catalog, "ghost") is None
    assert "Unknown skill 'ghost'" in caplog.text
    assert forced_skill_addendum("a", None, "pdf") is None


@pytest.mark.parametrize(
    ("text", "explicit", "expected"),
    [
        ("/pdf-forms fill", None, ("pdf-forms", "fill")),
        ("/pdf-forms", None, ("pdf-forms", "Use the pdf-forms skill.")),
        ("/y hi", "x", ("x", "/y hi")),
        ("no command", None, (None, "no command")),
        ("/volume:dup go", None, ("volume:dup", "go")),
    ],
)
def test_a_leading_slash_command_names_the_skill(
    text: str, explicit: str | None, expected: tuple[str | None, str]
) -> None:  # K21
    assert split_skill_command(text, explicit) == expected


def test_a_slash_command_is_split_off_only_when_it_names_a_visible_skill() -> None:
    catalog = resolve_catalog("a", [skill("pdf", "bundle-agent")], [], None)
    forced, messages = choose_skill(catalog, None, [Message("user", "/pdf fill it")])
    assert forced == "pdf" and messages == [Message("user", "fill it")]
    forced, messages = choose_skill(catalog, None, [Message("user", "/etc/hosts is odd")])
    assert forced is None and messages == [Message("user", "/etc/hosts is odd")]
    assert choose_skill(None, None, [Message("user", "/pdf x")])[0] is None
