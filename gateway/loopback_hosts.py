"""A server without authentication answers only requests addressed to this machine.

With ``auth.mode: none`` every caller is the one user, so such a server listens only on a
loopback address (``tether.cli.listen``). That keeps other machines out, but not a web page open
in the user's browser: a page whose own name its attacker points at ``127.0.0.1`` (DNS
rebinding) makes its requests same-origin, JSON POSTs and reading the answers included, with no
CORS preflight to refuse. Such a request still names the attacker's site in its ``Host`` header,
so this server answers only a ``Host`` that is a loopback address, ``localhost`` (or a name under
``.localhost``, which browsers never resolve through DNS) or the name it listens on; anything
else is a 403 before any route runs. A request without ``Host`` (HTTP/1.0) comes from no browser
and passes. With ``--insecure`` (a non-loopback address) whoever reaches the port is the user
anyway, and with authentication the caller's credentials decide: no check then.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from ipaddress import IPv6Address, ip_address

from aiohttp import web
from aiohttp.typedefs import Middleware

from tether.errors import ErrorCode
from tether.gateway.responses import ApiError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
NOT_THIS_HOST = (
    "this server has no authentication, so it answers only requests addressed to localhost or "
    "a loopback address, and the Host header names another: reach it as localhost, or configure "
    "bearer tokens (see docs/security.md)"
)


def is_loopback_address(text: str) -> bool:
    """Whether ``text`` is a loopback address literal (an IPv4-mapped one counts as its IPv4);
    ValueError when it is no address."""
    address = ip_address(text)
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (a name is resolved)."""
    if not host:
        return False  # all interfaces
    try:
        return is_loopback_address(host)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return False
    return bool(infos) and all(is_loopback_address(str(info[4][0])) for info in infos)


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port or an IPv6 literal's brackets."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.removesuffix(".")


def addressed_here(header: str, listen_host: str) -> bool:
    """Whether a ``Host`` header names this machine: a loopback address, ``localhost`` or a name
    under it, or the name the server listens on (checked at start to resolve to loopback only)."""
    name = host_name(header)
    if name == "localhost" or name.endswith(".localhost") or name == listen_host.lower():
        return True
    try:
        return is_loopback_address(name)
    except ValueError:
        return False


def loopback_hosts_only(listen_host: str) -> Middleware:
    """Middleware: a 403 for a request whose ``Host`` does not name this machine."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        for header in request.headers.getall("Host", ()):
            if not addressed_here(header, listen_host):
                raise ApiError(ErrorCode.FORBIDDEN, message=NOT_THIS_HOST)
        return await handler(request)

    return middleware
