"""Who is calling: the owner every invocation belongs to."""

from __future__ import annotations

import hmac

from aiohttp import web

from tether.settings import AuthSettings

ANONYMOUS = "anonymous"
MAX_OWNER_CHARS = 256


class Unauthorized(Exception):
    pass


def resolve_owner(request: web.Request, auth: AuthSettings) -> str:
    """The authenticated principal, per the configured mode."""
    if auth.mode == "none":
        return ANONYMOUS
    if auth.mode == "bearer":
        return _bearer_owner(request.headers.get("Authorization", ""), auth.tokens)
    for header in ("X-Forwarded-User", "X-Forwarded-Email"):
        value = request.headers.get(header, "").strip()
        if value:
            return value[:MAX_OWNER_CHARS]
    return ANONYMOUS


def _bearer_owner(header: str, tokens: dict[str, str]) -> str:
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented:
        raise Unauthorized
    owner = None
    for name, token in tokens.items():
        if hmac.compare_digest(token.encode(), presented.strip().encode()):
            owner = name
    if owner is None:
        raise Unauthorized
    return owner
