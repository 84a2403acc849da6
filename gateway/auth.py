"""Who is calling: the owner every invocation belongs to, and whom Tether believes about it.

The mode is decided once at start (:func:`resolve_auth`); ``auto`` becomes the one the other
settings imply:

- ``none``: no authentication; every caller is the one user ``anonymous``. For a single user on
  loopback: the CLI refuses a non-loopback address in this mode unless told ``--insecure``.
- ``forwarded``: the owner is ``X-Forwarded-User`` (else ``X-Forwarded-Email``) as set by a
  trusted proxy (``auth.trusted_proxies``, matched against the TCP peer address) or by a platform
  whose proxy is the only way in (Databricks Apps). A request without an identity is refused.
- ``bearer``: ``Authorization: Bearer <token>``; the owner is the token's name.

The identity headers are honoured only from a trusted source. From any other peer a request
that carries them is refused with 401 in every mode: never believed, never silently dropped.
Tokens and identity values never appear in a response, and nothing here logs.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from typing import Literal

from aiohttp import web
from multidict import CIMultiDictProxy

from tether.errors import ErrorCode
from tether.gateway.responses import ApiError
from tether.owners import SINGLE_USER, owner_name_problem
from tether.settings import AuthSettings

IDENTITY_HEADERS = ("X-Forwarded-User", "X-Forwarded-Email")
ACCESS_TOKEN_HEADER = "X-Forwarded-Access-Token"
"""The caller's own token, set by Databricks Apps' proxy (user authorization): believed only
from a trusted source, in ``forwarded`` mode, and kept in memory only (tether.credentials)."""
DATABRICKS_APPS_ENV = ("DATABRICKS_APP_NAME", "DATABRICKS_APP_PORT")
"""Set by Databricks Apps in every app's environment; both present means we run there."""

Mode = Literal["none", "forwarded", "bearer"]
Network = IPv4Network | IPv6Network
Address = IPv4Address | IPv6Address


class AuthConfigError(ValueError):
    """The auth settings cannot work as written: they identify nobody, contradict each other,
    or leave the mode ambiguous. Raised at start, before anything listens."""


@dataclass(frozen=True)
class BearerToken:
    owner: str
    digest: bytes  # SHA-256 of the token: compared in constant time, whatever its length


@dataclass(frozen=True)
class Authenticator:
    """The resolved policy of one gateway; :meth:`owner` applies it to a request."""

    mode: Mode
    trusted_proxies: tuple[Network, ...] = ()
    platform: str | None = None
    """A platform whose proxy is the only way in: every peer is that proxy."""
    tokens: tuple[BearerToken, ...] = field(default=(), repr=False)

    def owner(self, request: web.Request) -> str:
        """The authenticated principal of ``request``, or an :class:`ApiError` (401 / 400)."""
        carried = [
            name for name in (*IDENTITY_HEADERS, ACCESS_TOKEN_HEADER) if name in request.headers
        ]
        if carried and not self.trusts(peer_address(request)):
            raise unauthenticated(f"{carried[0]} is accepted only from a trusted proxy")
        if self.mode == "bearer":
            presented = request.headers.getall("Authorization", [])
            if len(presented) > 1:  # which one a proxy in front checked, Tether cannot know
                raise invalid_identity("Authorization was sent more than once")
            return self._bearer_owner(presented[0] if presented else "")
        if self.mode == "forwarded":
            return forwarded_owner(request.headers)
        return SINGLE_USER

    def access_token(self, request: web.Request) -> str | None:
        """The caller's ``X-Forwarded-Access-Token``, when the proxy that named the owner set
        it (``forwarded`` mode, a trusted source: :meth:`owner` refused any other); else None.
        Never logged, never in an error."""
        if self.mode != "forwarded":
            return None
        values = request.headers.getall(ACCESS_TOKEN_HEADER, [])
        if len(values) > 1:
            raise invalid_identity(f"{ACCESS_TOKEN_HEADER} was sent more than once")
        token = values[0].strip() if values else ""
        if token and not all("!" <= ch <= "~" for ch in token):
            raise invalid_identity(f"{ACCESS_TOKEN_HEADER} is not a token")
        return token or None

    def trusts(self, peer: Address | None) -> bool:
        """Whether identity headers from this TCP peer are the proxy's, not a client's."""
        if self.platform is not None:
            return True
        return peer is not None and any(peer in network for network in self.trusted_proxies)

    def describe(self) -> str:
        """One line for the start-up log: the mode and what it trusts (never a token)."""
        if self.mode == "none":
            return f"auth none: one user, {SINGLE_USER!r}"
        if self.mode == "bearer":
            return f"auth bearer: {len(self.tokens)} token(s)"
        sources = [f"platform {self.platform}"] if self.platform else []
        sources += [str(network) for network in self.trusted_proxies]
        return f"auth forwarded: identity headers trusted from {', '.join(sources)}"

    def _bearer_owner(self, header: str) -> str:
        scheme, _, presented = header.strip().partition(" ")
        presented = presented.strip()
        if scheme.lower() != "bearer" or not presented:
            raise unauthenticated("an Authorization: Bearer token is required", challenge=True)
        # Header bytes that are not UTF-8 arrive surrogate-escaped: compare the original bytes.
        digest = hashlib.sha256(presented.encode("utf-8", "surrogateescape")).digest()
        owner = None
        for token in self.tokens:  # no early exit: every token is compared
            if hmac.compare_digest(token.digest, digest):
                owner = token.owner
        if owner is None:
            raise unauthenticated("unknown bearer token", challenge=True)
        return owner


def forwarded_owner(headers: CIMultiDictProxy[str]) -> str:
    """X-Forwarded-User, else X-Forwarded-Email, checked whole: never cut, never altered."""
    for name in IDENTITY_HEADERS:
        values = headers.getall(name, [])
        if len(values) > 1:  # a proxy that appends instead of replacing lets a client spoof
            raise invalid_identity(f"{name} was sent more than once")
        value = values[0].strip() if values else ""
        if value:
            problem = owner_name_problem(value)
            if problem:
                raise invalid_identity(f"{name} {problem}")
            return value
    raise unauthenticated("no identity: neither X-Forwarded-User nor X-Forwarded-Email was sent")


def peer_address(request: web.Request) -> Address | None:
    """The TCP peer's address (an IPv4-mapped IPv6 peer counts as its IPv4 address)."""
    transport = request.transport
    peername = transport.get_extra_info("peername") if transport is not None else None
    if not isinstance(peername, tuple) or not peername:
        return None  # a closed connection or a Unix socket: no address to trust
    return parsed_address(str(peername[0]))


@functools.lru_cache(maxsize=4096)
def parsed_address(host: str) -> Address | None:
    """``host`` as an address, once per host (a gateway sees few: its proxies)."""
    try:
        address = ip_address(host)
    except ValueError:
        return None
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def detect_platform(auth: AuthSettings, environ: Mapping[str, str]) -> str | None:
    """The platform we run on, if its proxy is to be trusted: configured, or detected."""
    if auth.platform == "databricks_apps":
        return "databricks_apps"
    if auth.platform == "auto" and all(environ.get(name) for name in DATABRICKS_APPS_ENV):
        return "databricks_apps"
    return None


def resolve_auth(auth: AuthSettings, environ: Mapping[str, str] = os.environ) -> Authenticator:
    """Decide the mode once, at start; a policy that can identify nobody is an error."""
    platform = detect_platform(auth, environ)
    mode = resolve_mode(auth, platform)
    if mode == "forwarded" and platform is None and not auth.trusted_proxies:
        raise AuthConfigError(
            "auth.mode is forwarded but nothing is trusted to set the identity headers: set "
            "auth.trusted_proxies (TETHER_AUTH__TRUSTED_PROXIES) to your proxy's addresses, "
            "or auth.platform when running on Databricks Apps (see docs/security.md)"
        )
    if mode == "bearer" and not auth.tokens:
        raise AuthConfigError(
            "auth.mode is bearer but auth.tokens (TETHER_AUTH__TOKENS) is empty "
            "(see docs/security.md)"
        )
    tokens = tuple(
        BearerToken(owner, hashlib.sha256(secret.get_secret_value().encode()).digest())
        for owner, secret in auth.tokens.items()
    )
    return Authenticator(mode, tuple(auth.trusted_proxies), platform, tokens)


def resolve_mode(auth: AuthSettings, platform: str | None) -> Mode:
    """``auto`` is the mode the other settings imply; settings that a mode would silently
    ignore while leaving everyone one user are an error, never a quiet downgrade."""
    forwarded = platform is not None or bool(auth.trusted_proxies)
    if auth.mode == "none" and (forwarded or auth.tokens):
        raise AuthConfigError(
            "auth.mode is none (no authentication) but auth.tokens, auth.trusted_proxies or "
            "a platform are configured: set auth.mode to bearer or forwarded, or remove them "
            "(auth.platform: none turns Databricks Apps detection off)"
        )
    if auth.mode != "auto":
        return auth.mode
    if forwarded and auth.tokens:
        raise AuthConfigError(
            "auth.mode is auto but both bearer tokens and a trusted proxy or platform are "
            "configured: set auth.mode to bearer or forwarded"
        )
    return "forwarded" if forwarded else "bearer" if auth.tokens else "none"


def unauthenticated(message: str, *, challenge: bool = False) -> ApiError:
    headers = {"WWW-Authenticate": 'Bearer realm="tether"'} if challenge else None
    return ApiError(ErrorCode.UNAUTHENTICATED, status=401, message=message, headers=headers)


def invalid_identity(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_REQUEST, status=400, message=message)
