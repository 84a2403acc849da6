"""The gateway's access log line: what it holds, what it leaves out, and when it is written."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from tests.harness import start_dev
from tether.gateway.access_log import AccessLog
from tether.settings import Settings

LOGGER = "aiohttp.access"


def request() -> web.BaseRequest:
    headers = {"User-Agent": "secret-agent/1.0", "Referer": "https://example.test/?token=x"}
    return make_mocked_request("GET", "/api/invocations/abc/events?after=3", headers=headers)


def test_one_line_with_address_request_status_and_duration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    access = AccessLog(logging.getLogger(LOGGER), "")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        access.log(request(), web.Response(status=202), 0.0123)
    [record] = caplog.records
    line = record.getMessage()
    assert line.endswith('"GET /api/invocations/abc/events?after=3" 202 12.3 ms')
    assert "secret-agent" not in line and "example.test" not in line


def test_nothing_is_formatted_when_info_is_off(caplog: pytest.LogCaptureFixture) -> None:
    access = AccessLog(logging.getLogger(LOGGER), "")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert not access.enabled
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert access.enabled


def test_the_setting_is_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_ACCESS_LOG", raising=False)
    assert Settings().access_log
    monkeypatch.setenv("TETHER_ACCESS_LOG", "false")
    assert not Settings().access_log


@pytest.mark.parametrize("setting", [None, "false"])
def test_a_served_process_writes_access_lines_unless_the_setting_is_off(
    tmp_path: Path, setting: str | None
) -> None:
    """`tether dev` (and the gateway, through the same ``serve``) at INFO: one line per request
    by default, none with ``access_log`` false, while its other INFO lines go on."""
    env = {} if setting is None else {"TETHER_ACCESS_LOG": setting}
    proc, base = start_dev(tmp_path, None, env, proxy_auth=False)
    try:
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/api/invocations/no-such-invocation", timeout=10)
        missing.value.close()
        assert missing.value.code == 404
    finally:
        proc.stop()  # a graceful stop: every line written is in the log
    log = proc.log()
    assert " INFO " in log and "tether.store.migrate: applied migration" in log  # INFO goes on
    written = [line for line in log.splitlines() if LOGGER in line]
    if setting is None:
        assert any('"GET /api/invocations/no-such-invocation" 404' in line for line in written)
    else:
        assert written == []
