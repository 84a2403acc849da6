"""Agent definitions: code agents, Markdown front matter, folder loading (spec §4.1–4.4)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tether.agents import (
    DefinitionError,
    ScriptedModel,
    SupervisorAdapter,
    create_agent,
    load_agents_dir,
    supervisor_tools,
    tool,
)
from tether.agents.markdown import parse_front_matter
from tether.agents.registry import (
    AgentRegistry,
    capability_warnings,
    extensions,
    model_tools,
    system_prompt,
    tool_index,
)

EXAMPLES = Path(__file__).parents[2] / "examples" / "agents"


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return q


def write_agent(root: Path, agent_id: str, text: str) -> Path:
    folder = root / agent_id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "agent.md"
    path.write_text(text)
    return path


def test_a_code_agent_keys_its_tools_and_sub_agents() -> None:
    helper = create_agent("helper", "Helps with things.")
    agent = create_agent("main", "Main.", tools=[lookup], agents=[helper])
    index = tool_index(agent)
    assert set(index) == {"agent-helper", "lookup"}
    assert index["agent-helper"].definition.description == "Helps with things."
    assert index["agent-helper"].definition.parameters["required"] == ["input"]


def test_a_code_agent_that_reaches_itself_is_rejected() -> None:
    a = create_agent("a")
    b = create_agent("b", agents=[a])
    a.agents["b"] = b  # a cycle made after the fact
    with pytest.raises(DefinitionError, match="cycle"):
        create_agent("a", agents=[b])


@pytest.mark.parametrize("bad", ["", "has space", "x" * 65, "-dash"])
def test_invalid_agent_names_are_rejected(bad: str) -> None:
    with pytest.raises(DefinitionError, match="agent name"):
        create_agent(bad)


def test_a_tool_of_an_unrecognized_shape_is_rejected() -> None:
    with pytest.raises(DefinitionError, match="unrecognized shape"):
        create_agent("a", tools={"x": object()})


def test_hosted_tools_go_to_extensions_not_to_model_tools() -> None:
    genie = supervisor_tools.genie_space("01AB", "NYC taxi")
    agent = create_agent("a", tools=[genie, lookup])
    index = tool_index(agent)
    assert [t.name for t in model_tools(index)] == ["lookup"]
    assert extensions(index) == {"databricks.supervisor": {"hostedTools": [genie.spec]}}
    assert extensions(tool_index(create_agent("b", tools=[lookup]))) is None


def test_capability_mismatches_are_warnings() -> None:
    genie = supervisor_tools.genie_space("01AB", "NYC taxi")
    scripted = ScriptedModel.of("x")
    assert (
        "hosted Supervisor tools"
        in capability_warnings(create_agent("a", tools=[genie]), scripted)[0]
    )
    supervisor = object.__new__(SupervisorAdapter)
    assert (
        "ignored by Supervisor API"
        in capability_warnings(create_agent("a", tools=[lookup]), supervisor)[0]
    )


def test_front_matter_parses_and_the_body_becomes_instructions() -> None:
    parsed = parse_front_matter("---\nmodel: m\nflag: yes\n---\n\n  Body text.\n", "x.md")
    assert parsed.front_matter == {"model": "m", "flag": "yes"}  # YAML 1.2: yes is a string
    assert parsed.body == "Body text."
    assert parse_front_matter("no fence here\n", "x.md").front_matter == {}
    assert parse_front_matter("---\n---\nbody", "x.md").body == "body"


def test_invalid_yaml_names_the_file(tmp_path: Path) -> None:
    write_agent(tmp_path, "bad", "---\nmodel: [unclosed\n---\nx")
    with pytest.raises(DefinitionError, match=r"Invalid YAML frontmatter \(.*bad/agent.md\)"):
        load_agents_dir(tmp_path)


def test_an_agent_file_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = write_agent(tmp_path, "bad", "---\nmodel: x\n---\n")
    path.write_bytes(path.read_bytes() + b"caf\xe9")
    with pytest.raises(DefinitionError, match=r"Cannot read agent file .*bad/agent.md: Unicode"):
        load_agents_dir(tmp_path)


@pytest.mark.parametrize(
    ("front", "message"),
    [
        ("maxSteps: 0", "'maxSteps' must be a whole number of at least 1"),
        ("maxSteps: -1", "'maxSteps' must be a whole number of at least 1"),
        ("maxTokens: 0", "'maxTokens' must be a whole number of at least 1"),
        ("script: [{tool_calls: [{name: t, args: [1, 2]}]}]", "'args' must be a mapping"),
        ("script: [{tool_calls: [{name: t, args: abc}]}]", "'args' must be a mapping"),
    ],
)
def test_values_that_cannot_work_name_the_file_and_key(
    tmp_path: Path, front: str, message: str
) -> None:
    write_agent(tmp_path, "a", f"---\n{front}\n---\nx")
    with pytest.raises(DefinitionError, match=rf"a/agent.md: .*{message}"):
        load_agents_dir(tmp_path)


def test_front_matter_that_is_not_a_mapping_is_rejected(tmp_path: Path) -> None:
    write_agent(tmp_path, "bad", "---\n[1, 2]\n---\nx")
    with pytest.raises(DefinitionError, match="must be a YAML object"):
        load_agents_dir(tmp_path)


def test_unknown_keys_warn_and_still_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_agent(tmp_path, "ok", "---\nbananas: 3\nmaxSteps: ten\n---\nx")
    with caplog.at_level(logging.WARNING):
        registry = load_agents_dir(tmp_path)
    assert "Ignoring unknown frontmatter key 'bananas'" in caplog.text
    assert registry.agents["ok"].max_steps is None  # a wrong type is dropped


def test_toolkits_is_a_migration_error(tmp_path: Path) -> None:
    write_agent(tmp_path, "old", "---\ntoolkits: [files]\n---\nx")
    with pytest.raises(DefinitionError, match="toolkits.*no longer supported"):
        load_agents_dir(tmp_path)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("'plugin:files'", "plugin references are not supported"),
        ("''", "empty string in 'tools:'"),
        ("{a: 1}", "invalid 'tools:' entry"),
        ("ghost", "references 'ghost'.*Available: lookup"),
    ],
)
def test_bad_tool_entries_name_the_file_and_key(tmp_path: Path, entry: str, message: str) -> None:
    write_agent(tmp_path, "a", f"---\ntools: [{entry}]\n---\nx")
    with pytest.raises(DefinitionError, match=message):
        load_agents_dir(tmp_path, tools={"lookup": lookup})


def test_markdown_agents_name_code_tools_from_the_tools_module(tmp_path: Path) -> None:
    write_agent(tmp_path, "a", "---\ntools: [lookup]\n---\nx")
    registry = load_agents_dir(tmp_path, tools={"lookup": lookup})
    assert registry.agents["a"].tools == {"lookup": lookup}


def test_sub_agents_resolve_in_two_passes(tmp_path: Path) -> None:
    write_agent(tmp_path, "planner", "---\nagents: [helper]\n---\nPlan.")
    write_agent(tmp_path, "helper", "---\nagents: [planner]\n---\nHelp.")
    registry = load_agents_dir(tmp_path)
    assert "agent-helper" in tool_index(registry.agents["planner"])
    assert "agent-planner" in tool_index(registry.agents["helper"])  # mutual delegation is fine


def test_a_code_agent_wins_as_a_sub_agent_and_on_a_collision(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_agent(tmp_path, "planner", "---\nagents: [helper]\n---\nPlan.")
    write_agent(tmp_path, "helper", "Markdown helper.")
    code_helper = create_agent("helper", "Code helper.")
    with caplog.at_level(logging.WARNING):
        registry = load_agents_dir(tmp_path, code_agents=[code_helper])
    assert registry.agents["planner"].agents["helper"] is code_helper
    assert registry.agents["helper"] is code_helper
    assert "code definition takes precedence" in caplog.text


def test_an_agent_cannot_reference_itself(tmp_path: Path) -> None:
    write_agent(tmp_path, "planner", "---\nagents: [planner]\n---\nx")
    with pytest.raises(DefinitionError, match="cannot reference itself"):
        load_agents_dir(tmp_path)


def test_an_unknown_sub_agent_lists_the_available_ones(tmp_path: Path) -> None:
    write_agent(tmp_path, "planner", "---\nagents: [ghost]\n---\nx")
    write_agent(tmp_path, "other", "x")
    with pytest.raises(DefinitionError, match="unknown agent 'ghost'. Available: other, planner"):
        load_agents_dir(tmp_path)


def test_agents_must_be_a_list_of_ids(tmp_path: Path) -> None:
    write_agent(tmp_path, "planner", "---\nagents: [1, '']\n---\nx")
    with pytest.raises(DefinitionError, match="planner/agent.md: 'agents' must be a list"):
        load_agents_dir(tmp_path)


def test_a_folder_with_both_code_and_markdown_is_an_error(tmp_path: Path) -> None:
    write_agent(tmp_path, "helper", "x")
    (tmp_path / "helper" / "agent.py").write_text("")
    with pytest.raises(DefinitionError, match="both a code agent .* and a markdown agent"):
        load_agents_dir(tmp_path)


def test_a_code_agent_file_is_loaded(tmp_path: Path) -> None:
    (tmp_path / "coder").mkdir()
    (tmp_path / "coder" / "agent.py").write_text(
        "from shared.agents import create_agent\nagent = create_agent('coder', 'Code.')\n"
    )
    assert load_agents_dir(tmp_path).agents["coder"].instructions == "Code."


def test_top_level_markdown_is_rejected_and_empty_folders_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "skills").mkdir()
    write_agent(tmp_path, "a", "x")
    assert list(load_agents_dir(tmp_path).agents) == ["a"]
    (tmp_path / "stray.md").write_text("x")
    with pytest.raises(DefinitionError, match="unsupported top-level markdown"):
        load_agents_dir(tmp_path)


def test_auth_accepts_only_on_behalf_of_user(tmp_path: Path) -> None:
    write_agent(tmp_path, "a", "---\nauth: sometimes\n---\nx")
    with pytest.raises(DefinitionError, match="'auth'"):
        load_agents_dir(tmp_path)


def test_default_agent_precedence(tmp_path: Path) -> None:
    write_agent(tmp_path, "a", "x")
    write_agent(tmp_path, "m", "---\ndefault: true\n---\nx")
    assert load_agents_dir(tmp_path).default_name() == "m"
    code = create_agent("z", default=True)
    assert load_agents_dir(tmp_path, code_agents=[code]).default_name() == "z"
    assert load_agents_dir(tmp_path, code_agents=[code], default_agent="a").default_name() == "a"
    with pytest.raises(DefinitionError, match="'ghost' is not registered"):
        load_agents_dir(tmp_path, default_agent="ghost")
    assert AgentRegistry.of([create_agent("b"), create_agent("c")]).default_name() == "b"


def test_the_system_prompt_composes_base_and_instructions() -> None:
    agent = create_agent("a", "Do X.")
    assert system_prompt(agent).endswith("\n\nDo X.") and "You are a" in system_prompt(agent)
    assert system_prompt(create_agent("a", "Do X.", base_system_prompt=False)) == "Do X."
    assert system_prompt(create_agent("a", "Do X.", base_system_prompt="Base.")) == "Base.\n\nDo X."
    assert system_prompt(agent, with_base=False) == "Do X."


def test_the_example_agents_load() -> None:
    from tether.agents.mcp import McpConfig

    registry = load_agents_dir(EXAMPLES, mcp=McpConfig(allow_localhost=True))  # notes: loopback
    assert sorted(registry.agents) == ["bookings", "greeter", "notes", "planner", "weather"]
    assert registry.default_name() == "greeter"
    assert set(tool_index(registry.agents["weather"])) == {"get_weather"}
    assert registry.agents["bookings"].approval_timeout_s == 600


def test_the_agents_package_imports_neither_gateway_nor_worker() -> None:
    import ast

    root = Path(__file__).parents[2] / "shared" / "agents"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert not name.startswith(("gateway", "worker")), f"{path} imports {name}"


def test_the_example_app_loads_by_module_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.app import load_app

    monkeypatch.chdir(Path(__file__).parents[2])
    app = load_app("examples.agents.app:app")
    assert app.invoke_handler is app.recover_handler is not None
