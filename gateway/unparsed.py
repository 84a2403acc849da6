"""Requests aiohttp cannot parse, answered in the API's one error shape.

aiohttp answers a request it cannot parse (a header holding a control character, a line over its
limit, a malformed request line, ``Content-Length`` beside ``Transfer-Encoding``) by itself,
before any route or middleware runs: with a ``text/plain`` 400 that repeats the offending line, an
``Authorization`` header's token included, and an ERROR log line whose traceback holds the same
bytes. :func:`install` replaces that answer (``RequestHandler.handle_error``, which aiohttp calls
for these faults and for an error no middleware answered) with the JSON error every other refusal
has, naming the kind of fault and never the bytes sent, still closing the connection, and one
WARNING line with the status, the fault's class and the peer (a 5xx, the server's own fault,
keeps its traceback, which quotes no request). A client that speaks something
else than HTTP to the port (a bad method in a connection's first request) is logged at DEBUG, as
aiohttp does.
"""

from __future__ import annotations

import logging

from aiohttp import http_exceptions as faults
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from tether.errors import ErrorCode
from tether.gateway.edge_headers import name_the_server
from tether.gateway.responses import error_response

log = logging.getLogger(__name__)

REASONS: tuple[tuple[type[Exception], str], ...] = (
    (faults.LineTooLong, "the request line or a header is too long"),
    (faults.InvalidHeader, "a header is malformed"),
    (faults.BadHttpMethod, "the method is not one HTTP has"),
    (faults.BadStatusLine, "the request line is malformed"),
    (faults.InvalidURLError, "the request target is malformed"),
    (faults.PayloadEncodingError, "the body's framing or encoding is malformed"),
)
"""What a client is told of each parser fault, most specific first; any other: not valid HTTP."""


def reason(exc: BaseException | None) -> str:
    """The client's words for a fault, which never quote what it sent."""
    for kind, words in REASONS:
        if isinstance(exc, kind):
            return words
    return "the request is not valid HTTP"


def handle_error(
    self: RequestHandler,
    request: web.BaseRequest,
    status: int = 500,
    exc: BaseException | None = None,
    message: str | None = None,
) -> web.StreamResponse:
    """``RequestHandler.handle_error`` (module doc); ``message``, aiohttp's text of the fault,
    is not used: it quotes the request."""
    fault = type(exc).__name__ if exc is not None else "none"
    if status >= 500:  # a fault of the server's, around the error middleware: its traceback
        log.error("%s answered %d by the server (%s)", request.remote, status, fault, exc_info=exc)
    elif isinstance(exc, faults.BadHttpMethod) and getattr(self, "_request_count", 0) == 1:
        log.debug("%s sent something that is not HTTP (%s)", request.remote, fault)
    else:
        log.warning(
            "%s sent a request that is not valid HTTP: %d (%s)", request.remote, status, fault
        )
    if request.writer.output_size > 0:  # aiohttp's own rule: the response began, no other
        raise ConnectionError("a response was sent already; the connection is broken")
    if status >= 500:
        response = error_response(
            ErrorCode.INVOCATION_FAILED, http_status=status, message="internal error"
        )
    else:
        response = error_response(
            ErrorCode.INVALID_REQUEST, http_status=status, message=reason(exc)
        )
    response.force_close()
    name_the_server(response)  # no app, so no on_response_prepare: named here
    return response


def install() -> None:
    """Answer unparsable requests as above, in every aiohttp server of this process."""
    RequestHandler.handle_error = handle_error  # type: ignore[method-assign]
