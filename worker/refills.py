"""Whether a freed slot claims at once.

A slot frees when an attempt ends (or parks); its refill claims whatever may run now: work whose
token found no free slot, and work that waited for the ended attempt (its tenant's or the
deployment's cap). In a deployment of many processes, tokens and finishes happen elsewhere too,
so a freed slot always claims.

Where every token of the deployment comes to this process (``tether dev``, the one server of its
file), it can count the queued work no token of its stands for, and a freed slot claims only
while there is some. Every queued invocation came with one token: a token's claim that starts
an attempt takes one queued invocation with it; one that finds no slot, starts nothing (the
work waits for a cap or its time) or fails leaves one queued without a token (**owed** + 1);
any other claim that starts an attempt (a freed slot's, the periodic pass's, a reserved slot's)
takes one whose token is still to come or is owed (owed - 1: below zero, tokens in flight will
find their work gone). So in a burst, where every token finds a slot, freed slots claim
nothing: before, once one token came up short they all claimed, took the work of the tokens in
flight, which then came up short in turn, and a burst ran about twice the claim transactions it
needed. A freed slot's claim that finds nothing while nothing else holds a cap here (an attempt
running, a claim in flight, an attempt left to recovery) and no token came up short meanwhile
proves nothing claimable is queued: the count starts again from zero (and at start, when work
may be queued from before this process, freed slots claim until such a claim). Where the count
drifts, it errs toward claiming: a token re-sent by the reaper, or a session's next invocation
given a token of its own when its turn comes (``Services.after_terminal``), counts as work owed
until such a claim. What runs later without a token (a retry's backoff elapsing, a cap raised
by an operator, a cap held by a dead process's attempt until the reaper replaces it) is claimed
by the node's periodic pass, as everywhere. A second ``tether dev`` that starts on the same file
signs the lock file (:func:`tether.worker.wiring.sole_server`): from then on this process's
freed slots always claim, since that one takes tokens too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tether.store.schema import Claim


class FreedSlots:
    def __init__(self, busy: Callable[[], int]) -> None:
        self._busy = busy
        """Cap holders of this process: attempts running or left to recovery, claims in flight
        (the one reporting included)."""
        self._alone: Callable[[], bool] = lambda: False
        self._unknown = True  # at start: work queued before this process ran
        self._owed = 0
        """Queued invocations no token of this process stands for (below zero: tokens in flight
        whose work another claim started)."""
        self._short = 0
        """Tokens that came up short so far: a claim proves nothing is owed only if none did
        meanwhile."""

    def every_token_comes_here(self, alone: Callable[[], bool]) -> None:
        """This process takes every token of the deployment while ``alone()`` holds."""
        self._alone = alone

    def token_unserved(self) -> None:
        """A token found no free slot, or its claim started nothing or failed."""
        self._short += 1
        self._owed += 1

    def started_without_token(self, count: int = 1) -> None:
        """A claim other than a token's started ``count`` attempts."""
        self._owed -= count

    async def claimed(self, claim: Awaitable[Claim | None], *, token: bool) -> Claim | None:
        """``claim``'s result, counted (a token's, or another's: a freed slot's, a pass's)."""
        short = self._short
        try:
            won = await claim
        except BaseException:
            if token:
                self.token_unserved()
            raise
        if won is not None:
            if not token:
                self.started_without_token()
        elif token:
            self.token_unserved()
        elif self._short == short and self._busy() <= 1:
            self._unknown = False
            self._owed = 0
        return won

    def claims(self) -> bool:
        """Whether a freed slot claims at once."""
        return self._unknown or self._owed > 0 or not self._alone()
