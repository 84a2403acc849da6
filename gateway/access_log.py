"""The gateway's access log: one line per request on the ``aiohttp.access`` logger, at INFO.

aiohttp's own access logger parses a format, formats the time itself (the log format already
carries it) and builds an ``extra`` mapping for every request: 4 % of ``tether dev``'s loop under
a burst, 11 % of a gateway under a reconnect storm. This one writes the fields an operator reads
(client address, method, path with query, status, duration), lets the logging call format them
only when a handler takes the record (directly where Tether's own handler alone takes it:
:func:`tether.logs.log_line`), and logs nothing the client wrote in free form (no
``User-Agent``, no ``Referer``)."""

from __future__ import annotations

import logging

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

from tether.logs import log_line


class AccessLog(AbstractAccessLogger):
    """``<address> "<METHOD> <path>" <status> <ms> ms``, e.g. ``127.0.0.1 "GET /health" 200
    0.4 ms``."""

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        log_line(
            self.logger,
            logging.INFO,
            '%s "%s %s" %d %.1f ms',
            request.remote or "-",
            request.method,
            request.path_qs,
            response.status,
            time * 1000,
        )
