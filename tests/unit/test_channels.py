"""The queued-work announcement: a batch's tenants in one message, read back as sent, and a
message from an older gateway (one tenant, alone) read as that tenant."""

from __future__ import annotations

import pytest

from tether.channels import queued_message, queued_tenants
from tether.owners import owner_name_problem
from tether.store.tenants import LimitInvalid, check_tenant_name


@pytest.mark.parametrize(
    "tenants",
    [["acme"], ["acme", "globex"], ["a b", "ünïcode ✓", "x@example.com", "[json]", "a,b"]],
)
def test_an_announcement_names_its_tenants_as_sent(tenants: list[str]) -> None:
    assert queued_tenants(queued_message(tenants)) == tenants


def test_an_older_gateways_message_is_its_one_tenant() -> None:
    assert queued_tenants("acme corp") == ["acme corp"]


def test_no_tenant_or_owner_name_holds_the_separator() -> None:
    """What keeps one message's names apart: neither rule admits a line break."""
    assert owner_name_problem("a\nb") is not None
    with pytest.raises(LimitInvalid):
        check_tenant_name("a\nb")
