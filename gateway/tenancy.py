"""Whose tenant a caller is, and whether the caller is an admin (docs/security.md).

Every invocation belongs to a tenant: the one the trusted proxy names in ``auth.tenant_header``
(forwarded mode only, from a trusted source: the same trust as the identity headers), else the
owner's entry in ``auth.tenants``, else the owner. A tenant's name is what an owner's may be, so
every owner is a tenant name but ``*``, the defaults' name: that owner unmapped is a 400 at
accept. The admin API is for the owners named in ``auth.admins``; with no authentication
(``tether dev``'s one local user) that user is admin. Decided once at start
(:func:`resolve_tenancy`); a setting that names an impossible tenant (a mapping's, or a bearer
token's unmapped owner ``*``) is an :class:`AuthConfigError` there, before anything listens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aiohttp import web

from tether.errors import ErrorCode
from tether.gateway.auth import (
    AuthConfigError,
    Authenticator,
    invalid_identity,
    peer_address,
    unauthenticated,
)
from tether.gateway.responses import ApiError
from tether.settings import AuthSettings
from tether.store.tenants import DEFAULTS, LimitInvalid, check_tenant_name


@dataclass(frozen=True)
class Tenancy:
    auth: Authenticator
    mapping: Mapping[str, str] = field(default_factory=dict)
    header: str = ""
    admins: frozenset[str] = frozenset()

    def tenant(self, request: web.Request, owner: str) -> str:
        """The tenant of ``owner``'s request (``owner`` as :meth:`Authenticator.owner` gave
        it, so the caller is already authenticated)."""
        named = self._from_header(request)
        if named is not None:
            return named
        if owner in self.mapping:
            return self.mapping[owner]
        if owner == DEFAULTS:  # an owner passed the name rule at authentication; "*" is left
            raise invalid_identity(
                f"the owner {owner!r} cannot be its own tenant ({DEFAULTS!r} names the "
                "defaults): an admin maps it to one in auth.tenants"
            )
        return owner

    def is_admin(self, owner: str) -> bool:
        return self.auth.mode == "none" or owner in self.admins

    def require_admin(self, request: web.Request) -> str:
        """The caller, if an admin; 401 for an unknown caller, 403 for anyone else."""
        owner = self.auth.owner(request)
        if not self.is_admin(owner):
            raise ApiError(ErrorCode.FORBIDDEN, status=403)
        return owner

    def _from_header(self, request: web.Request) -> str | None:
        if not self.header:
            return None
        values = request.headers.getall(self.header, [])
        if not values:
            return None
        if self.auth.mode != "forwarded" or not self.auth.trusts(peer_address(request)):
            raise unauthenticated(f"{self.header} is accepted only from a trusted proxy")
        if len(values) > 1:
            raise invalid_identity(f"{self.header} was sent more than once")
        if not values[0].strip():  # empty, as for the identity headers: not named
            return None
        try:
            return tenant_name(values[0].strip())
        except LimitInvalid as exc:
            raise invalid_identity(f"{self.header}: {exc}") from None


def tenant_name(name: str) -> str:
    """A tenant's name as a caller may be given it: never the defaults row."""
    check_tenant_name(name)
    if name == DEFAULTS:
        raise LimitInvalid(f"{DEFAULTS!r} names the defaults, not a tenant")
    return name


def resolve_tenancy(settings: AuthSettings, auth: Authenticator) -> Tenancy:
    for owner, tenant in settings.tenants.items():
        try:
            tenant_name(tenant)
        except LimitInvalid as exc:
            raise AuthConfigError(f"auth.tenants: the tenant of {owner!r}: {exc}") from None
    for token in auth.tokens if auth.mode == "bearer" else ():
        if token.owner not in settings.tenants:
            try:
                tenant_name(token.owner)
            except LimitInvalid as exc:
                raise AuthConfigError(
                    f"auth.tokens: the owner {token.owner!r} cannot be its own tenant ({exc}): "
                    "map it to one in auth.tenants"
                ) from None
    return Tenancy(auth, dict(settings.tenants), settings.tenant_header, frozenset(settings.admins))
