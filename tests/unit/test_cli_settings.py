"""What ``tether`` says about settings it cannot use: one line naming the setting (or the file and
where in it) and the rule, exit status 2, never the value and never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.cli import main

SECRET = "SuperSecretToken123456"


@pytest.fixture(autouse=True)
def no_tether_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("TETHER_", "DATABRICKS_APP_")):
            monkeypatch.delenv(name)


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The lines ``tether`` printed on refusing ``argv`` with status 2."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and SECRET not in captured.err + captured.out
    return captured.err.splitlines()


def test_a_file_that_is_not_yaml_is_named_with_the_line_and_column_never_the_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(f"auth:\n  tokens:\n    ci: {SECRET}: x\n")
    lines = refused(["--config", str(config), "gateway"], capsys)
    assert lines == [f"tether: {config}: not valid YAML (line 3, column 31)"]


@pytest.mark.parametrize(("text", "kind"), [("- a\n- b\n", "a list"), ("just text\n", "a string")])
def test_a_file_that_holds_no_mapping_says_what_it_holds_instead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, kind: str
) -> None:
    config = tmp_path / "flat.yaml"
    config.write_text(text)
    lines = refused(["--config", str(config), "gateway"], capsys)
    assert lines == [
        f"tether: {config}: the settings file must hold a mapping of setting names to values, "
        f"not {kind}"
    ]


def test_a_file_that_cannot_be_read_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.yaml"
    lines = refused(["--config", str(missing), "gateway"], capsys)
    assert lines == [
        f"tether: {missing}: cannot read the settings file (No such file or directory)"
    ]


def test_each_bad_setting_is_one_line_with_its_name_and_rule(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TETHER_PORT", "-1")
    monkeypatch.setenv("TETHER_AUTH__TOKENS", f'{{"ci": "{SECRET[:8]}"}}')
    lines = refused(["gateway"], capsys)
    assert lines[0] == "tether: settings: port: Input should be greater than or equal to 0"
    assert lines[1].startswith("tether: settings: auth.tokens: the token of 'ci' must be")
    assert len(lines) == 2 and SECRET[:8] not in "".join(lines)


def test_a_variable_that_is_not_json_where_json_is_needed_names_the_section(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TETHER_AUTH__TOKENS", f'{{"ci": {SECRET}')
    lines = refused(["gateway"], capsys)
    assert len(lines) == 1 and 'field "auth"' in lines[0]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("TETHER_TIMERS__STALE_AFTR", "tether: settings: timers.stale_aftr: no such setting"),
        (
            "TETHER_TIMER__STALE_AFTER",
            "tether: settings: TETHER_TIMER__STALE_AFTER: no such setting",
        ),
    ],
)
def test_a_variable_that_names_no_setting_is_refused_by_its_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, says: str
) -> None:
    monkeypatch.setenv(name, "5")
    [line] = refused(["gateway"], capsys)
    assert line.startswith(says)
