"""The ``auth`` settings: who the caller is, and whom Tether believes about it (docs/security.md).

Part of the one settings object (:mod:`tether.settings`, which re-exports it); kept apart because
its validation (tokens, trusted proxies) is the longest of any section.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, IPvAnyNetwork, SecretStr, field_validator
from pydantic_settings import NoDecode

from tether.env_lists import listed, mapping
from tether.owners import owner_name_problem
from tether.settings_section import DAY, SettingsSection

AuthMode = Literal["auto", "none", "forwarded", "bearer"]
Platform = Literal["auto", "databricks_apps", "none"]
MIN_TOKEN_CHARS = 16


class AuthSettings(SettingsSection):  # whose errors never echo a value, such as a token
    """Who the caller is, and whom Tether believes about it (docs/security.md)."""

    mode: AuthMode = Field(
        "auto",
        description=(
            "auto: what the other auth settings imply (forwarded with trusted_proxies or a "
            "detected platform such as Databricks Apps, bearer with tokens, else none); "
            "none: no authentication, every caller is the one user 'anonymous' (the server "
            "refuses a non-loopback address unless started with --insecure); forwarded: the "
            "owner is X-Forwarded-User (else X-Forwarded-Email) as set by a trusted proxy or "
            "platform, and a request without one is refused; bearer: Authorization: Bearer "
            "<token> must be one of `tokens`, and the owner is the token's name."
        ),
    )
    tokens: Annotated[dict[str, SecretStr], NoDecode] = Field(
        default_factory=dict,
        description=(
            "bearer mode: owner name → token (at least 16 visible ASCII characters, each "
            'token unique); in the environment as JSON, e.g. {"ci": "<token>"}.'
        ),
    )
    trusted_proxies: Annotated[list[IPvAnyNetwork], NoDecode] = Field(
        default_factory=list,
        description=(
            "Addresses or CIDRs (IPv4, IPv6) of the proxies whose X-Forwarded-User/-Email "
            "headers are believed, matched against the TCP peer address (never against "
            "X-Forwarded-For); comma-separated in the environment. Those headers from any "
            "other peer are refused with 401."
        ),
    )
    platform: Platform = Field(
        "auto",
        description=(
            "A platform whose own proxy sets the identity headers and is the only way in: "
            "auto detects Databricks Apps (DATABRICKS_APP_NAME and DATABRICKS_APP_PORT set); "
            "databricks_apps asserts it; none turns detection off."
        ),
    )

    admins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "Owner names allowed to use the admin API (/api/admin/...: tenants' limits); "
            "comma-separated in the environment. With mode none, the one local user is admin."
        ),
    )
    tenants: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description=(
            "Owner name → tenant (whose limits, shares and budgets the owner's invocations "
            'count against); in the environment as JSON, e.g. {"alice@example.com": "team-a"}. '
            "An owner not named here is its own tenant; the owner *, the defaults' name, must "
            "be named here to start work."
        ),
    )
    tenant_header: str = Field(
        "",
        description=(
            "A request header naming the caller's tenant, e.g. X-Forwarded-Tenant, believed "
            "only from the trusted proxy or platform of forwarded mode (it wins over `tenants`); "
            "from any other peer, or in another mode, a request carrying it is refused (401). "
            "Empty: no header."
        ),
    )

    user_token_ttl: float = Field(
        3600.0,
        gt=0,
        le=7 * DAY,
        description=(
            "Seconds a process keeps a caller's X-Forwarded-Access-Token in memory for an "
            "unfinished invocation (never stored anywhere else)."
        ),
    )

    @field_validator("trusted_proxies", "admins", mode="before")
    @classmethod
    def comma_separated(cls, value: Any) -> Any:
        return listed(value)

    @field_validator("tokens", "tenants", mode="before")
    @classmethod
    def json_mapping(cls, value: Any) -> Any:
        return mapping(value)

    @field_validator("tenant_header")
    @classmethod
    def header_name(cls, value: str) -> str:
        value = value.strip()
        if value and not all(ch.isascii() and (ch.isalnum() or ch == "-") for ch in value):
            raise ValueError("auth.tenant_header must be a header name (letters, digits, '-')")
        return value

    @field_validator("tokens")
    @classmethod
    def usable_tokens(cls, tokens: dict[str, SecretStr]) -> dict[str, SecretStr]:
        # Messages name the owner, never the token: settings errors reach the terminal.
        seen: set[str] = set()
        for owner, secret in tokens.items():
            problem = owner_name_problem(owner)
            if problem:
                raise ValueError(f"a token's owner name {problem}")
            token = secret.get_secret_value()
            if len(token) < MIN_TOKEN_CHARS or not all("!" <= ch <= "~" for ch in token):
                raise ValueError(
                    f"the token of {owner!r} must be at least {MIN_TOKEN_CHARS} visible ASCII "
                    "characters (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
                )
            if token in seen:
                raise ValueError(f"the token of {owner!r} is also another owner's token")
            seen.add(token)
        return tokens
