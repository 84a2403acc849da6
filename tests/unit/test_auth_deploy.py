"""The shipped deployment files parse, set only real settings, and start safe.

Docker is not run here: each file's environment is loaded through the real settings model, and
the gateway's own listening rule is asked whether it would start.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.cli.listen import ListenRefused, check_listen
from tether.gateway.auth import resolve_auth
from tether.settings import Settings, load_settings, reference

ROOT = Path(__file__).resolve().parents[2]
SETTING_NAMES = {row.variable for row in reference()} | {"TETHER_CONFIG"}
TOKENS = '{"ci": "deploy-test-token-0123456789"}'
REQUIRED = {"TETHER_AUTH__TOKENS": TOKENS}  # what an operator must supply
COMPOSE_VARIABLE = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def kubernetes() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((ROOT / "deploy" / "kubernetes.yaml").read_text()))


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines():
        if line.startswith("ENV "):
            for pair in line[4:].split():
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def interpolate(value: str) -> str:
    """Compose's ${VAR:-default} and ${VAR:?message}, for an operator who set only REQUIRED."""

    def one(match: re.Match[str]) -> str:
        name, kind, default = match.groups()
        if name in REQUIRED:
            return REQUIRED[name]
        assert kind == "-", f"${{{name}}} has no default and is not in REQUIRED"
        return default

    return COMPOSE_VARIABLE.sub(one, value)


def settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name in list(os.environ):
        if name.startswith(("TETHER_", "DATABRICKS_APP_")):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_settings()


def assert_real_settings(env: dict[str, str], where: str) -> None:
    for name in env:
        if name.startswith("TETHER_"):
            assert name in SETTING_NAMES, f"{where}: {name} is not a setting"


def starts_on(settings: Settings, host: str) -> bool:
    try:
        check_listen("tether gateway", host, resolve_auth(settings.auth, {}), insecure=False)
    except ListenRefused:
        return False
    return True


def test_the_image_alone_refuses_to_serve_everyone_as_one_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = dockerfile_env()
    assert_real_settings(env, "Dockerfile")
    assert env["TETHER_HOST"] == "0.0.0.0"
    assert not starts_on(settings_from(env, monkeypatch), env["TETHER_HOST"])
    assert "--insecure" not in (ROOT / "deploy" / "Dockerfile").read_text().split("CMD", 1)[1]


def test_compose_sets_only_real_settings_and_the_gateway_needs_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = compose()["services"]
    for name, service in services.items():
        assert_real_settings(service.get("environment", {}), f"compose {name}")
        assert "--insecure" not in service.get("command", [])
    gateway = services["gateway"]
    assert "${TETHER_AUTH__TOKENS:?" in gateway["environment"]["TETHER_AUTH__TOKENS"]
    env = {**dockerfile_env(), **{k: interpolate(v) for k, v in gateway["environment"].items()}}
    settings = settings_from(env, monkeypatch)
    assert settings.auth.mode == "bearer" and starts_on(settings, settings.host)


def test_compose_publishes_the_gateway_on_loopback_only_by_default() -> None:
    services = compose()["services"]
    published = [(name, interpolate(p)) for name, s in services.items() for p in s.get("ports", [])]
    assert published == [("gateway", "127.0.0.1:8000:8000")]


def test_kubernetes_config_sets_only_real_settings_and_starts_with_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = next(d for d in kubernetes() if d["kind"] == "ConfigMap")["data"]
    assert_real_settings(config, "kubernetes ConfigMap")
    env = {**dockerfile_env(), **config, **REQUIRED}  # the Secret supplies the tokens
    settings = settings_from(env, monkeypatch)
    assert settings.auth.mode == "bearer" and starts_on(settings, settings.host)


def test_kubernetes_admits_only_the_ingress_to_the_gateway_and_nobody_to_workers() -> None:
    docs = kubernetes()
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    pods = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
        for d in docs
        if d["kind"] == "Deployment"
    }
    gateway = policies["tether-gateway"]
    assert gateway["podSelector"]["matchLabels"] == pods["tether-gateway"]
    assert gateway["policyTypes"] == ["Ingress"]
    for rule in gateway["ingress"]:
        assert rule["from"], "an empty `from` admits everyone"
        assert all(
            peer.get("namespaceSelector") or peer.get("podSelector") for peer in rule["from"]
        )
        assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]
    worker = policies["tether-worker"]
    assert worker["podSelector"]["matchLabels"] == pods["tether-worker"]
    assert worker["policyTypes"] == ["Ingress"] and worker["ingress"] == []
    for deployment in (d for d in docs if d["kind"] in ("Deployment", "Job")):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert "--insecure" not in container["command"]


def test_the_security_page_is_linked_and_covers_every_auth_setting() -> None:
    page = (ROOT / "docs" / "security.md").read_text()
    assert "docs/security.md" in (ROOT / "README.md").read_text()
    for variable in SETTING_NAMES:
        if variable.startswith("TETHER_AUTH__"):
            assert variable in page, variable
    for name in ("DATABRICKS_APP_NAME", "DATABRICKS_APP_PORT", "--insecure"):
        assert name in page, name
