"""Headers every answer of the gateway carries, whoever built it.

- ``Server: tether``: aiohttp's default names the Python and aiohttp versions, which tells a
  scanner which published flaws to try; the answers to requests aiohttp cannot parse
  (:mod:`tether.gateway.unparsed`) carry the same.
- ``Cache-Control: no-store`` on everything under ``/api/``: an owner's invocations, outputs,
  threads and the admin API are private, and a shared cache between a proxy that authenticates
  by cookie and the gateway must not keep them for the next user (an answer that sets its own,
  an event stream's ``no-cache, no-transform``, keeps it).
"""

from __future__ import annotations

from aiohttp import web

SERVER = "tether"
PRIVATE = "/api/"


def name_the_server(response: web.StreamResponse) -> None:
    response.headers["Server"] = SERVER


async def edge_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: run for every answer of the app, custom routes' included."""
    name_the_server(response)
    if request.path.startswith(PRIVATE):
        response.headers.setdefault("Cache-Control", "no-store")
