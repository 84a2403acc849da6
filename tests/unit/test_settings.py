from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from tether.liveness_keepalive import (
    MAX_KEEPALIVE_COUNT,
    MAX_KEEPALIVE_IDLE,
    MAX_STALE_AFTER,
    keepalive_for,
)
from tether.settings import Settings, UnknownVariable, load_settings, reference


def test_defaults_are_documented_and_sane() -> None:
    s = Settings()
    assert s.timers.heartbeat_interval == 2.0 and s.timers.stale_after == 10.0
    assert s.timers.retention == 7 * 24 * 3600 and s.limits.max_body_bytes == 1024 * 1024
    assert s.worker.concurrency >= 100
    for model in (s, s.timers, s.limits, s.worker, s.auth, s.agents):
        for name, field in type(model).model_fields.items():
            assert field.description or name in {"timers", "limits", "worker", "auth", "agents"}, (
                name
            )


def test_yaml_then_environment_then_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tether.yaml"
    config.write_text("port: 9000\ntimers:\n  stale_after: 20\n  heartbeat_interval: 1\n")
    monkeypatch.setenv("TETHER_TIMERS__STALE_AFTER", "30")
    s = load_settings(str(config), host="0.0.0.0")
    assert (s.port, s.timers.stale_after, s.timers.heartbeat_interval, s.host) == (
        9000,
        30,
        1,
        "0.0.0.0",
    )


def test_stale_threshold_must_exceed_the_heartbeat_by_a_margin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_TIMERS__STALE_AFTER", "3")
    monkeypatch.setenv("TETHER_TIMERS__HEARTBEAT_INTERVAL", "2")
    with pytest.raises(ValidationError, match="stale_after"):
        load_settings()


@pytest.mark.parametrize(
    ("grace", "interval", "stale"), [(0.9, 0.5, 10.0), (12.0, 0.5, 10.0), (1.0, 0.6, 10.0)]
)
def test_the_liveness_grace_spans_two_beats_and_never_outlasts_stale_after(
    grace: float, interval: float, stale: float
) -> None:
    timers = {"liveness_grace": grace, "liveness_interval": interval, "stale_after": stale}
    with pytest.raises(ValidationError, match="liveness_grace"):
        Settings.model_validate({"timers": timers})


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("prot: 1\n", "prot"),
        ("timers: {stale_aftr: 5}\n", "timers.stale_aftr"),
        ("limits: {max_queud: 5}\n", "limits.max_queud"),
        ("worker: {proceses: 2}\n", "worker.proceses"),
        ("auth: {mods: bearer}\n", "auth.mods"),
        ("agents: {max_step: 3}\n", "agents.max_step"),
    ],
)
def test_unknown_keys_are_errors_at_every_level(tmp_path: Path, text: str, where: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    with pytest.raises(ValidationError) as refused:
        load_settings(str(config))
    [problem] = refused.value.errors()
    assert (".".join(map(str, problem["loc"])), problem["type"]) == (where, "extra_forbidden")


def test_a_nested_variable_that_names_no_setting_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_TIMERS__STALE_AFTR", "5")
    with pytest.raises(ValidationError, match="timers.stale_aftr"):
        load_settings()


@pytest.mark.parametrize("name", ["TETHER_TIMER__STALE_AFTER", "TETHER_PORT__NUMBER"])
def test_a_variable_shaped_as_a_nested_setting_of_no_section_is_an_error(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "5")
    with pytest.raises(UnknownVariable, match=f"{name}: no such setting"):
        load_settings()


def test_other_variables_with_the_prefix_are_not_settings_and_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The prefix is shared: ``TETHER_CONFIG``, ``TETHER_EVENT_LOOP``, an app's own."""
    monkeypatch.setenv("TETHER_AGENTS_DIR", "agents")
    monkeypatch.setenv("TETHER_TEST_SOMETHING", "1")
    assert load_settings() == Settings()


@pytest.mark.parametrize(
    ("name", "meant"),
    [("TETHER_PROT", "TETHER_PORT"), ("TETHER_DATABASE_UR", "TETHER_DATABASE_URL")],
)
def test_a_variable_spelt_almost_like_a_setting_is_logged_as_a_likely_typo(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, name: str, meant: str
) -> None:
    """Not refused (the prefix is shared), but a typo that silently kept the default port or
    database is said: one WARNING naming the setting meant, once however often a process
    loads its settings."""
    from tether import settings_env

    monkeypatch.setattr(settings_env, "_warned", set())
    monkeypatch.setenv(name, "8001")
    assert load_settings() == Settings() == load_settings()
    assert caplog.text.count(f"{name} is no setting and is ignored; did you mean {meant}?") == 1


def test_the_projects_other_variables_are_no_typos(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from tether.agents.cli import AGENTS_DIR_ENV
    from tether.loops import ENV as EVENT_LOOP_ENV
    from tether.settings_env import OTHER_VARIABLES
    from tether.settings_file import CONFIG_ENV
    from tether.store.migrate import MIGRATIONS_ENV

    assert {AGENTS_DIR_ENV, EVENT_LOOP_ENV, CONFIG_ENV, MIGRATIONS_ENV} == OTHER_VARIABLES
    for name in (*OTHER_VARIABLES, "TETHER_TEST_SOMETHING", "TETHER_MYAPP_KEY"):
        monkeypatch.setenv(name, "x")
    monkeypatch.delenv(CONFIG_ENV)
    load_settings()
    assert "did you mean" not in caplog.text


def test_a_rule_between_settings_judges_the_merged_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stale_after from the file, heartbeat_interval from the environment: valid together,
    though the environment's alone (with the default stale_after, 10) would not be."""
    config = tmp_path / "tether.yaml"
    config.write_text("timers: {stale_after: 40}\n")
    monkeypatch.setenv("TETHER_TIMERS__HEARTBEAT_INTERVAL", "8")
    timers = load_settings(str(config)).timers
    assert (timers.stale_after, timers.heartbeat_interval) == (40, 8)
    monkeypatch.setenv("TETHER_TIMERS__STALE_AFTER", "12")  # the environment wins, and is judged
    with pytest.raises(ValidationError, match="stale_after"):
        load_settings(str(config))


def test_plain_postgres_urls_get_the_psycopg_driver() -> None:
    for scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        url = f"{scheme}://u@h/db"
        assert Settings(database_url=url).database_url == "postgresql+psycopg://u@h/db"
    direct = Settings.model_validate({"worker": {"liveness_url": "postgres://u@direct/db"}})
    assert direct.worker.liveness_url == "postgresql+psycopg://u@direct/db"


@pytest.mark.parametrize(
    ("setting", "url", "rule"),
    [
        ("database_url", "", "must be a PostgreSQL URL"),
        ("database_url", "garbage", "must be a PostgreSQL URL"),
        ("database_url", "mysql://u:s3cret@h/db", "must be a PostgreSQL URL"),
        ("database_url", "sqlite:///s3cret.db", "must be a PostgreSQL URL"),
        ("database_url", "postgresql+asyncpg://u:s3cret@h/db", "must be a PostgreSQL URL"),
        ("database_url", "postgresql://u:Super@s3cret@h:5432/db", "cannot be parsed"),
        ("database_url", "postgresql://u@h:s3cret/db", "cannot be parsed"),
        ("redis_url", "http://u:s3cret@h", "must be a Redis URL"),
        ("redis_url", "", "must be a Redis URL"),
        ("redis_url", "redis://:Super/s3cret@h:6390/0", "cannot be parsed"),
        ("pubsub_redis_url", "http://u:s3cret@h", "must be a Redis URL"),
    ],
)
def test_a_service_url_tether_cannot_use_is_refused_without_quoting_it(
    setting: str, url: str, rule: str
) -> None:
    with pytest.raises(ValidationError, match=rule) as refused:
        Settings.model_validate({setting: url})
    assert "s3cret" not in str(refused.value)
    [problem] = refused.value.errors()
    assert problem["loc"] == (setting,)


def test_the_services_tether_can_use() -> None:
    settings = Settings.model_validate(
        {
            "redis_url": "rediss://:p%2Fw@cache:6380/1",
            "pubsub_redis_url": "unix:///run/redis.sock?db=2",
            "worker": {"liveness_url": ""},
        }
    )
    assert settings.pubsub_redis == "unix:///run/redis.sock?db=2"
    assert settings.worker.liveness_url == ""


def test_the_log_level_is_a_level_name_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused with the settings, not by a worker process as it boots."""
    assert Settings(log_level=" warning ").log_level == "WARNING"
    monkeypatch.setenv("TETHER_LOG_LEVEL", "VERBOSE")
    with pytest.raises(ValidationError, match="log_level") as refused:
        load_settings()
    assert "VERBOSE" not in str(refused.value)  # the rule, never the value


def test_list_settings_read_json_or_commas_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One rule for every section's lists (``tether.env_lists``)."""
    monkeypatch.setenv("TETHER_AGENTS__MCP_TRUSTED_HOSTS", '["a.example", "b.example"]')
    monkeypatch.setenv("TETHER_AUTH__ADMINS", " ann , bob ,")
    settings = load_settings()
    assert settings.agents.mcp_trusted_hosts == ["a.example", "b.example"]
    assert settings.auth.admins == ["ann", "bob"]


@pytest.mark.parametrize("variable", ["TETHER_AUTH__TOKENS", "TETHER_AUTH__TENANTS"])
def test_a_mapping_that_is_not_json_names_its_setting_never_its_value(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """pydantic-settings' own decoding said only 'error parsing value for field "auth"'."""
    monkeypatch.setenv(variable, '{"ci": "a-secret-token-1234567')
    with pytest.raises(ValidationError) as refused:
        load_settings()
    [problem] = refused.value.errors()
    assert "__".join(map(str, problem["loc"])).upper() == variable.removeprefix("TETHER_")
    assert "not a JSON object" in problem["msg"] and "secret" not in problem["msg"]


def float_settings() -> list[str]:
    """The variable of every setting held as a float."""
    found = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, f"{prefix}{name.upper()}__")
            elif annotation is float:
                found.append(f"{prefix}{name.upper()}")

    walk(Settings, "TETHER_")
    return found


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400"])
@pytest.mark.parametrize("variable", float_settings())
def test_every_float_setting_is_finite(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as refused:
        load_settings()
    [problem] = refused.value.errors()
    assert "__".join(map(str, problem["loc"])).upper() == variable.removeprefix("TETHER_")


def test_every_float_setting_has_an_upper_bound_in_the_docs() -> None:
    bounds = {row.variable: row.allowed for row in reference()}
    assert float_settings() and all("≤" in bounds[v] for v in float_settings())


def test_stale_after_is_bounded_by_the_keepalive_the_kernel_accepts() -> None:
    """Linux refuses TCP_KEEPCNT above 127 and TCP_KEEPIDLE above 32,767 s: the liveness
    connection would not open. Past 254 s the probes stop at 127 and the idle time grows; a dead
    peer is noticed within stale_after / 2 all the way."""
    halves = [n / 2 for n in range(2, int(MAX_STALE_AFTER * 2) + 1, 97)] + [MAX_STALE_AFTER]
    for stale_after in halves:
        keepalive = keepalive_for(stale_after)
        assert keepalive.count <= MAX_KEEPALIVE_COUNT and keepalive.idle <= MAX_KEEPALIVE_IDLE
        assert keepalive.idle + keepalive.count <= max(2, stale_after / 2)
    assert keepalive_for(MAX_STALE_AFTER + 2).idle > MAX_KEEPALIVE_IDLE  # the bound is tight
    timers = Settings.model_validate({"timers": {"stale_after": 900}}).timers  # 508 was the cap
    assert timers.stale_after == 900
    with pytest.raises(ValidationError, match="less than or equal to 65788"):
        Settings.model_validate({"timers": {"stale_after": MAX_STALE_AFTER + 0.5}})


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("port: on\n", "port is a number, not true"),
        ("limits:\n  max_queued: off\n", "max_queued is a number, not false"),
        ("timers:\n  stale_after: yes\n", "stale_after is a number, not true"),
    ],
)
def test_a_boolean_is_no_number_in_the_settings_file(
    tmp_path: Path, text: str, refused: str
) -> None:
    """YAML reads on, off, yes and no as booleans, which pydantic took as 1 and 0: ``port: on``
    served on port 1."""
    path = tmp_path / "tether.yaml"
    path.write_text(text)
    with pytest.raises(ValidationError, match=refused):
        load_settings(str(path))
    path.write_text("access_log: on\n")  # a boolean setting still takes them
    assert load_settings(str(path)).access_log is True
