"""The vault forgets a caller's token after ``auth.user_token_ttl`` even when nobody asks for it
again (its invocation ended in another process, so ``after_terminal`` never ran here)."""

from __future__ import annotations

from tether.credentials import CredentialVault, UserCredential


def test_a_token_nobody_asks_for_again_is_forgotten_after_its_ttl() -> None:
    now = [0.0]
    vault = CredentialVault(ttl=60, clock=lambda: now[0])
    vault.put("ended-elsewhere", UserCredential("alice", "token-of-alice"))
    now[0] = 61.0
    vault.put("another", UserCredential("bob", "token-of-bob"))
    assert len(vault) == 1


def test_a_token_within_its_ttl_is_kept() -> None:
    now = [0.0]
    vault = CredentialVault(ttl=60, clock=lambda: now[0])
    alice = UserCredential("alice", "token-of-alice")
    vault.put("running", alice)
    now[0] = 59.0
    vault.put("another", UserCredential("bob", "token-of-bob"))
    assert vault.get("running") == alice


def test_a_refreshed_token_is_kept_and_an_older_one_behind_it_goes() -> None:
    now = [0.0]
    vault = CredentialVault(ttl=60, clock=lambda: now[0])
    alice, bob = UserCredential("alice", "a-1"), UserCredential("bob", "b-1")
    vault.put("a", alice)
    now[0] = 10.0
    vault.put("b", bob)
    now[0] = 50.0
    vault.put("a", UserCredential("alice", "a-2"))  # a repeated request brings a newer token
    now[0] = 71.0
    vault.put("c", UserCredential("carol", "c-1"))
    assert vault.get("b") is None and len(vault) == 2
    assert vault.get("a") == UserCredential("alice", "a-2")
