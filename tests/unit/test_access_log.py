"""The gateway's access log line: what it holds, what it leaves out, and when it is written."""

from __future__ import annotations

import logging

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from tether.gateway.access_log import AccessLog

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
