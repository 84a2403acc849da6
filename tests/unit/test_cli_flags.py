"""The command line: counts of processes and threads are at least 1, and ``--config`` is taken
before a command's name or after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.procs import free_port
from tether.cli import main, parse_args


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", "--processes", "-1"],
        ["worker", "--processes", "0"],
        ["worker", "--threads", "0"],
        ["gateway", "--processes", "-3"],
        ["gateway", "--processes", "0"],
    ],
)
def test_a_count_of_processes_or_threads_below_one_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert (
        f"error: argument {argv[1]}: must be at least 1, not {argv[2]}" in capsys.readouterr().err
    )


def test_a_count_that_is_no_number_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["worker", "--threads", "many"])
    assert "argument --threads: 'many' is not a whole number" in capsys.readouterr().err


def test_counts_given_are_kept_and_the_worker_falls_back_to_its_settings_only_when_none_is() -> (
    None
):
    assert parse_args(["worker", "--processes", "3"]).processes == 3
    assert parse_args(["worker"]).processes is None
    assert parse_args(["gateway"]).processes == 1


@pytest.mark.parametrize(
    "command",
    [
        ["dev"],
        ["gateway"],
        ["worker"],
        ["migrate"],
        ["reap"],
        ["tenants", "list"],
        ["tenants", "set", "acme", "--rate", "1"],
        ["run-agent", "hello"],
    ],
)
def test_every_command_takes_config_before_or_after_its_name(command: list[str]) -> None:
    assert parse_args(["--config", "before.yaml", *command]).config == "before.yaml"
    assert parse_args([*command, "--config", "after.yaml"]).config == "after.yaml"
    assert parse_args(["--config", "before.yaml", *command, "--config", "after.yaml"]).config == (
        "after.yaml"
    )
    assert parse_args(command).config is None


def test_tenants_takes_config_between_its_name_and_the_verb() -> None:
    assert parse_args(["tenants", "--config", "t.yaml", "list"]).config == "t.yaml"


def test_the_config_after_the_command_is_the_file_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a file not read would leave migrate to run: not on a database anyone uses
    monkeypatch.setenv("TETHER_DATABASE_URL", f"postgresql://nobody@127.0.0.1:{free_port()}/x")
    config = tmp_path / "tether.yaml"
    config.write_text("log_level: loud\n")
    assert main(["migrate", "--config", str(config)]) == 2
    assert "tether: settings: log_level: must be one of" in capsys.readouterr().err
