"""Skills in a run: the catalog in the prompt, the built-in tools, forcing, and recovery.

What a skill gave the model is durable: the prompt's skill block is the step ``<agent>#prompt``
and each load or file read is its tool call's step, so a replacement attempt in a process that
loaded a changed skill still gives the model exactly what the first attempt gave it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.agents.conftest import FakeSink, attempt, crash_after
from tests.agents.skill_fixtures import write_skill
from tether.agents import AgentRegistry, ScriptedModel, build_agent_app, load_agents_dir
from tether.app import AgentApp

SCRIPT = """---
model: scripted
skills: [pdf]
script:
  - tool_calls:
      - name: load_skill
        args: {skill: pdf}
  - tool_calls:
      - name: read_skill_file
        args: {skill: pdf, path: reference.md}
  - "Done: {result}"
---
You fill forms."""


def agents_folder(tmp_path: Path, body: str, reference: str) -> Path:
    write_skill(
        tmp_path / "skills", "pdf", description="Fill PDFs", body=body, reference_md=reference
    )
    (tmp_path / "filler").mkdir(exist_ok=True)
    (tmp_path / "filler" / "agent.md").write_text(SCRIPT)
    return tmp_path


class Loaded:
    """An app on the agents of ``folder``, and what its model was shown."""

    def __init__(self, folder: Path) -> None:
        self.registry: AgentRegistry = load_agents_dir(folder)
        self.app: AgentApp = build_agent_app(self.registry)

    def seen(self, agent: str = "filler") -> list[str]:
        """The contents of the messages of the model's last request."""
        model = self.registry.model_for(self.registry.get(agent))
        assert isinstance(model, ScriptedModel)
        return [m.content for m in model.requests[-1].messages]


def tool_results(sink: FakeSink) -> list[Any]:
    return [e.get("result") for e in sink.of_type("tool_result")]


async def test_the_model_sees_the_catalog_loads_the_skill_and_reads_its_file(
    tmp_path: Path,
) -> None:
    loaded = Loaded(agents_folder(tmp_path, "Step one: read the form.", "# Field names"))
    sink = FakeSink()
    result = await attempt(loaded.app, {"agent": "filler", "messages": "Fill it"}, sink)
    prompt = loaded.seen()[0]
    assert prompt.startswith("You are filler") and "## Available skills" in prompt
    assert "- **pdf**: Fill PDFs" in prompt
    skill, read = tool_results(sink)
    assert skill.startswith("# Skill: pdf") and "Step one: read the form." in skill
    assert "- reference.md" in skill and read == "# Field names"
    assert result["text"] == "Done: # Field names"
    assert "filler#prompt" in sink.steps


async def test_a_recovered_run_replays_what_the_first_attempt_read(tmp_path: Path) -> None:
    folder = agents_folder(tmp_path, "Old instructions.", "old reference")
    value = {"agent": "filler", "messages": "Fill it"}
    sink = await crash_after(Loaded(folder).app, value, steps=5)  # prompt, t0, c0, t1, c1
    write_skill(tmp_path / "skills", "pdf", description="Changed", body="New!", reference_md="new")
    survivor = Loaded(folder)
    result = await attempt(survivor.app, value, sink, 2, recovery=True)
    contents = survivor.seen()
    assert "- **pdf**: Fill PDFs" in contents[0] and "Changed" not in contents[0]
    assert any("Old instructions." in c for c in contents)
    assert "old reference" in contents and not any("New!" in c or c == "new" for c in contents)
    assert result["text"] == "Done: old reference"


async def test_a_forced_skill_is_in_the_prompt_and_survives_a_recovery(tmp_path: Path) -> None:
    folder = agents_folder(tmp_path, "Old instructions.", "ref")
    value = {"agent": "filler", "messages": "/pdf fill the tax form"}
    sink = await crash_after(Loaded(folder).app, value, steps=2)  # prompt, t0
    write_skill(tmp_path / "skills", "pdf", description="Fill PDFs", body="New!", reference_md="r")
    survivor = Loaded(folder)
    result = await attempt(survivor.app, value, sink, 2, recovery=True)
    prompt, asked = survivor.seen()[:2]
    assert 'The user explicitly requested the "pdf" skill' in prompt
    assert "Old instructions." in prompt and "New!" not in prompt
    assert asked == "fill the tax form"
    assert result["messages"][0] == {"role": "user", "content": "fill the tax form"}


async def test_an_explicit_skill_key_forces_it_and_an_unknown_one_is_ignored(
    tmp_path: Path,
) -> None:
    loaded = Loaded(agents_folder(tmp_path, "Body.", "ref"))
    await attempt(loaded.app, {"agent": "filler", "messages": "go", "skill": "pdf"}, FakeSink())
    assert "explicitly requested" in loaded.seen()[0]
    await attempt(loaded.app, {"agent": "filler", "messages": "go", "skill": "ghost"}, FakeSink())
    assert "explicitly requested" not in loaded.seen()[0]


async def test_an_agent_without_skills_records_no_prompt_step(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "agent.md").write_text("---\nmodel: scripted\nscript: [hi]\n---\nHi.")
    sink = FakeSink()
    await attempt(Loaded(tmp_path).app, "hello", sink)
    assert list(sink.steps) == ["plain#t0"]
