"""Where a server may listen: on loopback, or anywhere once its callers are authenticated.

Without authentication (``auth.mode: none``) every caller is the same user, so such a server
answers only on a loopback address unless it is told ``--insecure``. ``tether gateway`` and
``tether dev`` apply this one rule; the gateway then also answers only requests addressed to
this machine (``tether.gateway.loopback_hosts``: a browser's page cannot rebind its name here).
"""

from __future__ import annotations

import logging

from tether.gateway.auth import Authenticator
from tether.gateway.loopback_hosts import is_loopback

log = logging.getLogger("tether")


class ListenRefused(Exception):
    """The server would be open to anyone: the message says what to configure."""


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
