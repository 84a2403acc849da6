"""Request bodies, read whole and in time before any handler runs; a client that leaves is no error.

Every request that has a body gets it read here, within ``timers.body_read_timeout`` and
``limits.max_body_bytes`` (aiohttp's ``client_max_size``); handlers then find it cached
(``request.read()``, ``.json()``, ``.post()``), custom routes included. On Tether's own routes
the caller is authenticated first: an unknown caller gets its 401 at once, and the server neither
waits for nor holds its body (custom routes check their callers themselves).

- too slow (a silent or trickling upload): 408 ``request_timeout``, and the connection closes
  instead of waiting for the rest;
- too large: 413 ``payload_too_large``;
- the client disconnected, mid-upload or while its request was being answered: nobody is left to
  answer, so this is a normal event: logged at DEBUG without a traceback, and counted as 499
  (nginx's "client closed request") instead of a 500.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection

from aiohttp import web
from aiohttp.typedefs import Middleware

from tether.errors import ErrorCode
from tether.gateway.keys import AUTH, SETTINGS
from tether.gateway.responses import ApiError, error_response

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CLIENT_CLOSED_REQUEST = 499


def read_body(authenticated_first: Collection[Handler]) -> Middleware:
    """Middleware: the body read as above, once the caller of a route of
    ``authenticated_first`` (Tether's own) is known."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.body_exists and request.match_info.route.handler in authenticated_first:
            try:
                request.app[AUTH].owner(request)  # 401 / 400 before a byte of the body is read
            except ApiError as refused:
                response = refused.response()
                response.force_close()  # else aiohttp reads the unread body to its end
                return response
        return await read_then_handle(request, handler)

    return middleware


async def read_then_handle(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.body_exists:
        timeout = request.app[SETTINGS].timers.body_read_timeout
        try:
            async with asyncio.timeout(timeout):
                await request.read()
        except TimeoutError:
            log.info(
                "%s %s: request body not received within %gs",
                request.method,
                request.rel_url.raw_path,  # as sent, still percent-encoded: one line a message
                timeout,
            )
            response = error_response(ErrorCode.REQUEST_TIMEOUT)
            response.force_close()  # the rest of the body is never read
            return response
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(ErrorCode.PAYLOAD_TOO_LARGE) from None
        except ConnectionResetError:
            return client_left(request, "mid-upload")
    try:
        answer = await handler(request)
    except ConnectionResetError:
        if not is_gone(request):
            raise
        return client_left(request, "before its answer")
    if not answer.prepared and is_gone(request):  # a sync wait outlived its caller
        return client_left(request, "before its answer")
    return answer


def is_gone(request: web.Request) -> bool:
    return request.transport is None or request.transport.is_closing()


def client_left(request: web.Request, when: str) -> web.Response:
    log.debug("%s %s: the client disconnected %s", request.method, request.rel_url.raw_path, when)
    return web.Response(status=CLIENT_CLOSED_REQUEST, reason="Client Closed Request")
