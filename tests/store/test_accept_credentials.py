"""The caller's token on a grouped accept, on both stores: it reaches the vault only for the
caller's own invocation, and another owner's request for the same id in the same group, refused
as a conflict, neither replaces it nor takes it away."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.store.test_tenant_accept_batches import Sent
from tether.credentials import CredentialVault, UserCredential
from tether.gateway.accept import Acceptor
from tether.queue import Queue
from tether.store.schema import NewInvocation
from tether.store.store import Accepted, Conflict, Store


def turn(invocation_id: str, owner: str) -> NewInvocation:
    return NewInvocation(invocation_id, owner, None, {"q": 1}, "h", user_auth=True)


@pytest.mark.parametrize("first", ["alice", "bob"])
async def test_another_owners_request_for_the_same_id_leaves_the_callers_token(
    store: Store, first: str
) -> None:
    vault = CredentialVault()
    acceptor = Acceptor(store, Queue(Sent()), 0, credentials=vault)
    invocation_id = str(uuid.uuid4())
    second = "bob" if first == "alice" else "alice"
    tokens = {owner: UserCredential(owner, f"token-of-{owner}") for owner in (first, second)}
    results = await asyncio.gather(  # submitted together: one group, one flush
        acceptor.accept(turn(invocation_id, first), tokens[first]),
        acceptor.accept(turn(invocation_id, second), tokens[second]),
        return_exceptions=True,
    )
    assert isinstance(results[0], Accepted) and results[0].invocation.owner == first
    assert isinstance(results[1], Conflict)
    assert vault.get(invocation_id) == tokens[first]
    assert acceptor._carried == {}  # nothing left behind


async def test_a_repeated_request_without_a_token_keeps_the_one_carried(store: Store) -> None:
    vault = CredentialVault()
    acceptor = Acceptor(store, Queue(Sent()), 0, credentials=vault)
    invocation_id = str(uuid.uuid4())
    token = UserCredential("alice", "token-of-alice")
    results = await asyncio.gather(
        acceptor.accept(turn(invocation_id, "alice"), token),
        acceptor.accept(turn(invocation_id, "alice")),
    )
    assert all(isinstance(r, Accepted) for r in results)
    assert vault.get(invocation_id) == token


async def test_a_repeated_request_for_a_finished_invocation_keeps_no_token(store: Store) -> None:
    """Nothing would ever run it, so nothing would ever forget it (``after_terminal`` ran
    already): the token stays out of the vault."""
    vault = CredentialVault()
    acceptor = Acceptor(store, Queue(Sent()), 0, credentials=vault)
    invocation_id = str(uuid.uuid4())
    await acceptor.accept(turn(invocation_id, "alice"))
    assert await store.request_cancel(invocation_id) is not None  # queued: cancelled at once
    repeat = await acceptor.accept(
        turn(invocation_id, "alice"), UserCredential("alice", "token-of-alice")
    )
    assert isinstance(repeat, Accepted) and repeat.invocation.status.is_terminal
    assert len(vault) == 0
