"""What ``tether`` says about settings it cannot use: one line naming the setting (or the file and
where in it) and the rule, exit status 2, never the value and never a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.harness import Launch
from tests.procs import free_port
from tether.cli import main

SECRET = "SuperSecretToken123456"


@pytest.fixture(autouse=True)
def nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """No TETHER_* settings but services nothing listens on: a command that was not refused
    (the bug a test is here to catch) must not reach, let alone migrate, a real database."""
    for name in list(os.environ):
        if name.startswith(("TETHER_", "DATABRICKS_APP_")):
            monkeypatch.delenv(name)
    port = free_port()
    monkeypatch.setenv("TETHER_DATABASE_URL", f"postgresql://nobody@127.0.0.1:{port}/nowhere")
    monkeypatch.setenv("TETHER_REDIS_URL", f"redis://127.0.0.1:{port}/0")


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


@pytest.mark.parametrize(
    ("text", "kind"), [("1: 2\n", "a number"), ("null: x\n", "null"), ("true: x\n", "a boolean")]
)
def test_a_file_whose_top_level_key_is_no_name_says_so_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, kind: str
) -> None:
    config = tmp_path / "keys.yaml"
    config.write_text(f"port: 8000\n{text}")
    lines = refused(["--config", str(config), "dev"], capsys)
    assert lines == [f"tether: {config}: every setting name must be text, not {kind}"]


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


def test_a_variable_that_is_not_json_where_json_is_needed_names_the_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TETHER_AUTH__TOKENS", f'{{"ci": {SECRET}')
    lines = refused(["gateway"], capsys)
    [line] = lines
    assert line.startswith("tether: settings: auth.tokens: not a JSON object: ")


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


@pytest.mark.parametrize(
    ("variable", "url", "says"),
    [
        (
            "TETHER_REDIS_URL",
            f"redis://:Super/{SECRET}@127.0.0.1:6390/0",
            "tether: settings: redis_url: cannot be parsed as a Redis URL",
        ),
        (
            "TETHER_DATABASE_URL",
            f"postgresql+psycopg://postgres:Super@{SECRET}@127.0.0.1:5432/db",
            "tether: settings: database_url: cannot be parsed as a PostgreSQL URL",
        ),
        ("TETHER_DATABASE_URL", "", "tether: settings: database_url: must be a PostgreSQL URL"),
        ("TETHER_DATABASE_URL", f"mysql://u:{SECRET}@h/db", "tether: settings: database_url:"),
        ("TETHER_REDIS_URL", f"http://u:{SECRET}@h", "tether: settings: redis_url: must be"),
    ],
)
@pytest.mark.parametrize("command", [["gateway"], ["migrate"], ["reap"]])
def test_a_service_url_that_cannot_be_used_is_one_line_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    url: str,
    says: str,
    command: list[str],
) -> None:
    monkeypatch.setenv(variable, url)
    [line] = refused(command, capsys)
    assert line.startswith(says) and "Super" not in line


def test_the_database_url_of_a_tenants_command_is_judged_as_the_setting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    [line] = refused(["tenants", "list", "--database-url", "garbage"], capsys)
    assert line.startswith("tether: settings: database_url: must be a PostgreSQL URL")


def test_the_worker_command_refuses_a_url_it_cannot_use_before_starting_anything() -> None:
    launch = Launch()
    url = f"redis://:Super/{SECRET}@127.0.0.1:{free_port()}/0"
    done = subprocess.run(
        [*launch.command, "worker"],
        cwd=launch.cwd,
        env=launch.env({"TETHER_REDIS_URL": url}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("tether: settings: redis_url: cannot be parsed as a Redis URL")
    assert "Super" not in done.stderr + done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("TETHER_TIMERS__SHUTDOWN_GRACE", "inf"),
        ("TETHER_TIMERS__STALE_AFTER", "nan"),
        ("TETHER_TIMERS__STALE_AFTER", "70000"),  # past the keepalive idle Linux takes
    ],
)
def test_a_timer_that_is_not_finite_or_past_its_bound_is_refused_before_a_worker_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    [line] = refused(["worker"], capsys)
    setting = variable.removeprefix("TETHER_").replace("__", ".").lower()
    assert line.startswith(f"tether: settings: {setting}: ")
