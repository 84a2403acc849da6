"""The docs describe what the code does."""

from __future__ import annotations

from pathlib import Path

from tether.settings import reference

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_reference_matches_the_settings_model() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    table = text.split("<!-- settings:begin -->\n", 1)[1].split("<!-- settings:end -->", 1)[0]
    expected = ["| variable | default | range | meaning |", "| --- | --- | --- | --- |"]
    expected += [f"| `{v}` | `{d}` | {r} | {m} |" for v, d, r, m in reference()]
    assert table.strip().splitlines() == expected, "regenerate with: python -m tether.settings"


def test_readme_commands_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    for command in (
        "tether dev",
        "tether gateway",
        "tether worker",
        "tether migrate",
        "tether reap",
    ):
        assert command in readme, command
