"""`tether gateway` and `tether dev` refuse to be open to anyone: the one listening rule."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from tests.harness import ROOT
from tether.cli import main
from tether.cli.listen import ListenRefused, check_listen
from tether.gateway.auth import resolve_auth
from tether.gateway.loopback_hosts import is_loopback
from tether.settings import AuthSettings

NOBODY = resolve_auth(AuthSettings(), {})
TOKEN = "cli-token-0123456789abcdef"


@pytest.fixture(autouse=True)
def no_tether_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("TETHER_", "DATABRICKS_APP_")):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1", "localhost"])
def test_loopback_addresses_and_names(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.1.2.3", "2001:db8::1"])
def test_addresses_anyone_may_reach(host: str) -> None:
    assert not is_loopback(host)


def test_without_authentication_only_loopback_is_allowed() -> None:
    check_listen("tether gateway", "127.0.0.1", NOBODY, insecure=False)
    with pytest.raises(ListenRefused, match="--insecure") as refused:
        check_listen("tether gateway", "0.0.0.0", NOBODY, insecure=False)
    assert "TETHER_AUTH__TOKENS" in str(refused.value) and "docs/security.md" in str(refused.value)


def test_insecure_allows_it_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tether"):
        check_listen("tether dev", "0.0.0.0", NOBODY, insecure=True)
    assert "no authentication" in caplog.text


@pytest.mark.parametrize(
    "auth",
    [
        AuthSettings.model_validate({"mode": "bearer", "tokens": {"ci": TOKEN}}),
        AuthSettings.model_validate({"mode": "forwarded", "trusted_proxies": "10.0.0.0/8"}),
    ],
)
def test_with_authentication_any_address_is_allowed(auth: AuthSettings) -> None:
    check_listen("tether gateway", "0.0.0.0", resolve_auth(auth, {}), insecure=False)


@pytest.mark.parametrize("command", ["gateway", "dev"])
def test_the_commands_refuse_a_public_address_without_authentication(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to listen on 0.0.0.0" in err and "--insecure" in err


def test_forwarded_mode_that_trusts_nobody_does_not_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TETHER_AUTH__MODE", "forwarded")
    assert main(["gateway", "--port", "0"]) == 2
    assert "TETHER_AUTH__TRUSTED_PROXIES" in capsys.readouterr().err


def test_a_bad_token_setting_is_reported_without_the_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TETHER_AUTH__MODE", "bearer")
    monkeypatch.setenv("TETHER_AUTH__TOKENS", '{"ci": "short-secret"}')
    assert main(["gateway", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "auth.tokens" in err and "short-secret" not in err


def test_the_real_gateway_command_exits_with_the_reason() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", "gateway", "--host", "0.0.0.0", "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "refusing to listen" in done.stderr
