"""Where a server may listen: on loopback, or anywhere once its callers are authenticated.

Without authentication (``auth.mode: none``) every caller is the same user, so such a server
answers only on a loopback address unless it is told ``--insecure``. ``tether gateway`` and
``tether dev`` apply this one rule.
"""

from __future__ import annotations

import logging
import socket
from ipaddress import IPv6Address, ip_address

from tether.gateway.auth import Authenticator

log = logging.getLogger("tether")


class ListenRefused(Exception):
    """The server would be open to anyone: the message says what to configure."""


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (a name is resolved)."""
    if not host:
        return False  # all interfaces
    try:
        return _loopback_address(host)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return False
    return bool(infos) and all(_loopback_address(str(info[4][0])) for info in infos)


def _loopback_address(text: str) -> bool:
    address = ip_address(text)
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def check_listen(command: str, host: str, auth: Authenticator, insecure: bool) -> None:
    """Refuse (:class:`ListenRefused`) an unauthenticated server on a non-loopback address."""
    if auth.mode != "none" or is_loopback(host):
        return
    if insecure:
        log.warning(
            "%s listens on %s with no authentication (--insecure): whoever can reach it "
            "is the one user of this server",
            command,
            host or "all interfaces",
        )
        return
    raise ListenRefused(
        f"refusing to listen on {host or 'all interfaces'} with no authentication "
        "(auth.mode resolves to none, so every caller would be the same user). Configure "
        "bearer tokens (TETHER_AUTH__MODE=bearer, TETHER_AUTH__TOKENS) or a trusted proxy "
        "(TETHER_AUTH__MODE=forwarded, TETHER_AUTH__TRUSTED_PROXIES), listen on 127.0.0.1, "
        "or pass --insecure to accept the risk. See docs/security.md."
    )
