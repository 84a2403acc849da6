"""Whom the gateway believes: the resolved policy applied to single requests, no server."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict, CIMultiDictProxy

from tether.gateway.auth import (
    AuthConfigError,
    Authenticator,
    forwarded_owner,
    parsed_address,
    resolve_auth,
)
from tether.gateway.responses import ApiError
from tether.owners import MAX_OWNER_CHARS, SINGLE_USER
from tether.settings import AuthSettings

DATABRICKS_ENV = {"DATABRICKS_APP_NAME": "agents", "DATABRICKS_APP_PORT": "8000"}
TOKEN = "tok-0123456789abcdef"


class Peer:
    """A transport whose TCP peer is ``address`` (what aiohttp reads as ``peername``)."""

    def __init__(self, address: str | None) -> None:
        self.address = address

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return None if self.address is None else (self.address, 50000)
        return default


def request_from(address: str | None, headers: dict[str, str] | None = None) -> Any:
    return make_mocked_request(
        "POST", "/api/invocations", headers=headers or {}, transport=Peer(address)
    )


def authenticator(environ: dict[str, str] | None = None, **auth: Any) -> Authenticator:
    return resolve_auth(AuthSettings.model_validate(auth), environ or {})


def refusal(auth: Authenticator, request: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        auth.owner(request)
    return caught.value


def behind_proxy() -> Authenticator:
    return authenticator(mode="forwarded", trusted_proxies="10.0.0.0/8, fd00::/8")


def test_by_default_there_is_one_user_and_no_trust() -> None:
    auth = authenticator()
    assert auth.mode == "none" and auth.platform is None
    assert auth.owner(request_from("127.0.0.1")) == SINGLE_USER


@pytest.mark.parametrize(
    "settings",
    [
        {"mode": "none"},
        {"mode": "forwarded", "trusted_proxies": ["10.0.0.1"]},
        {"mode": "bearer", "trusted_proxies": ["10.0.0.1"], "tokens": {"ci": TOKEN}},
    ],
)
def test_identity_headers_from_an_untrusted_peer_are_refused_in_every_mode(
    settings: dict[str, Any],
) -> None:
    auth = authenticator(**settings)
    headers = {"X-Forwarded-Email": "boss@example.com", "Authorization": f"Bearer {TOKEN}"}
    error = refusal(auth, request_from("192.0.2.7", headers))
    assert error.status == 401 and error.code == "unauthenticated"
    assert "trusted proxy" in (error.message or "")


def test_a_trusted_proxy_names_the_owner_and_user_wins_over_email() -> None:
    auth = behind_proxy()
    request = request_from(
        "10.1.2.3", {"X-Forwarded-User": "u-42", "X-Forwarded-Email": "a@example.com"}
    )
    assert auth.owner(request) == "u-42"
    assert auth.owner(request_from("fd00::5", {"X-Forwarded-Email": "a@example.com"})) == (
        "a@example.com"
    )


def test_an_ipv4_mapped_peer_is_matched_as_its_ipv4_address() -> None:
    request = request_from("::ffff:10.9.9.9", {"X-Forwarded-User": "u"})
    assert behind_proxy().owner(request) == "u"


def test_x_forwarded_for_never_makes_a_peer_trusted() -> None:
    headers = {"X-Forwarded-For": "10.0.0.1", "X-Real-Ip": "10.0.0.1", "X-Forwarded-User": "u"}
    assert refusal(behind_proxy(), request_from("192.0.2.7", headers)).status == 401


def test_a_peer_without_an_address_is_not_trusted() -> None:
    assert refusal(behind_proxy(), request_from(None, {"X-Forwarded-User": "u"})).status == 401


def test_forwarded_mode_without_an_identity_is_refused_not_anonymous() -> None:
    for headers in ({}, {"X-Forwarded-User": "  "}):
        error = refusal(behind_proxy(), request_from("10.0.0.1", headers))
        assert error.status == 401 and "no identity" in (error.message or "")


def test_identities_are_never_cut_short() -> None:
    longest = "u" * MAX_OWNER_CHARS
    assert behind_proxy().owner(request_from("10.0.0.1", {"X-Forwarded-User": longest})) == longest
    error = refusal(behind_proxy(), request_from("10.0.0.1", {"X-Forwarded-User": longest + "x"}))
    assert error.status == 400 and error.code == "invalid_request"
    assert f"longer than {MAX_OWNER_CHARS}" in (error.message or "")


def test_identity_bytes_that_are_not_utf8_are_a_400() -> None:
    # aiohttp hands undecodable header bytes over surrogate-escaped, as here (the raw bytes
    # themselves go through a real server in test_auth_gateway.py)
    headers = CIMultiDictProxy(CIMultiDict({"X-Forwarded-User": "al\udcffice"}))
    with pytest.raises(ApiError) as caught:
        forwarded_owner(headers)
    assert caught.value.status == 400 and "not valid UTF-8" in (caught.value.message or "")


def test_an_identity_header_sent_twice_is_refused() -> None:
    headers = CIMultiDict([("X-Forwarded-User", "victim"), ("X-Forwarded-User", "me")])
    request = make_mocked_request("GET", "/", headers=headers, transport=Peer("10.0.0.1"))
    assert refusal(behind_proxy(), request).status == 400


def test_bearer_tokens_name_their_owner() -> None:
    auth = authenticator(mode="bearer", tokens={"ci": TOKEN, "ops": TOKEN[::-1]})
    assert auth.owner(request_from("192.0.2.7", {"Authorization": f"Bearer {TOKEN}"})) == "ci"
    assert auth.owner(request_from("192.0.2.7", {"Authorization": f"bearer  {TOKEN[::-1]} "})) == (
        "ops"
    )


@pytest.mark.parametrize(
    "header", [None, "Basic abc", "Bearer", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}é"]
)
def test_a_missing_unknown_or_undecodable_bearer_token_is_a_401_with_a_challenge(
    header: str | None,
) -> None:
    auth = authenticator(mode="bearer", tokens={"ci": TOKEN})
    error = refusal(auth, request_from("127.0.0.1", {"Authorization": header} if header else {}))
    assert error.status == 401 and error.headers == {"WWW-Authenticate": 'Bearer realm="tether"'}
    assert TOKEN not in (error.message or "")


def test_headers_from_a_trusted_proxy_do_not_replace_the_bearer_token() -> None:
    auth = authenticator(mode="bearer", tokens={"ci": TOKEN}, trusted_proxies=["10.0.0.1"])
    headers = {"X-Forwarded-User": "boss", "Authorization": f"Bearer {TOKEN}"}
    assert auth.owner(request_from("10.0.0.1", headers)) == "ci"


def test_databricks_apps_is_detected_from_its_environment_and_trusted_from_any_peer() -> None:
    auth = authenticator(DATABRICKS_ENV)
    assert (auth.mode, auth.platform) == ("forwarded", "databricks_apps")
    assert auth.owner(request_from("172.16.0.9", {"X-Forwarded-Email": "a@example.com"})) == (
        "a@example.com"
    )
    assert authenticator({"DATABRICKS_APP_NAME": "agents"}).mode == "none"  # both, or not there


def test_databricks_apps_can_be_asserted_or_its_detection_turned_off() -> None:
    assert authenticator(platform="databricks_apps").mode == "forwarded"
    assert authenticator(DATABRICKS_ENV, platform="none").mode == "none"


def test_a_policy_that_can_identify_nobody_is_a_start_up_error() -> None:
    with pytest.raises(AuthConfigError, match="trusted_proxies"):
        authenticator(mode="forwarded")
    with pytest.raises(AuthConfigError, match="tokens"):
        authenticator(mode="bearer")


def test_the_start_up_line_names_what_is_trusted_and_never_a_token() -> None:
    assert "10.0.0.0/8" in behind_proxy().describe()
    described = authenticator(mode="bearer", tokens={"ci": TOKEN})
    assert TOKEN not in described.describe() and TOKEN not in repr(described)


@pytest.mark.parametrize(
    ("settings", "mode"),
    [
        ({}, "none"),
        ({"tokens": {"ci": TOKEN}}, "bearer"),
        ({"trusted_proxies": "10.0.0.1"}, "forwarded"),
        ({"platform": "databricks_apps"}, "forwarded"),
    ],
)
def test_auto_is_the_mode_the_other_settings_imply(settings: dict[str, Any], mode: str) -> None:
    assert authenticator(**settings).mode == mode


@pytest.mark.parametrize(
    "settings",
    [
        {"mode": "none", "tokens": {"ci": TOKEN}},
        {"mode": "none", "trusted_proxies": "10.0.0.1"},
        {"tokens": {"ci": TOKEN}, "trusted_proxies": "10.0.0.1"},
    ],
)
def test_settings_that_would_be_ignored_or_are_ambiguous_stop_the_start(
    settings: dict[str, Any],
) -> None:
    with pytest.raises(AuthConfigError, match="auth.mode"):
        authenticator(**settings)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", IPv4Address("127.0.0.1")),
        ("::ffff:10.0.0.7", IPv4Address("10.0.0.7")),  # IPv4-mapped: the IPv4 address
        ("::1", IPv6Address("::1")),
        ("not-an-address", None),
    ],
)
def test_a_peer_host_is_read_as_its_address(host: str, expected: object) -> None:
    assert parsed_address(host) == expected
    assert parsed_address(host) == expected  # and the same again from the cache
