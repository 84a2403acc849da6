"""Whether a freed slot claims at once.

A slot frees when an attempt ends (or parks); its refill claims whatever may run now: work whose
token found no free slot, and work that waited for the ended attempt (its tenant's or the
deployment's cap). In a deployment of many processes, tokens and finishes happen elsewhere too,
so a freed slot always claims.

Where every token of the deployment comes to this process (``tether dev``, the one server of its
file), it knows when that claim would find nothing, and skips it: a lone invocation's refill was
two write transactions out of five (a claim from the known tenants, then a scan), in the way of
the next request. Queued work a refill could start exists only if a token found no free slot,
its claim started nothing (the work waits for a cap or its time) or failed: then the refills
claim until one finds nothing while nothing else holds a cap here (an attempt running, a claim
in flight, an attempt left to recovery) and no token went unserved meanwhile. A session's next
invocation gets a token of its own when its turn comes (``Services.after_terminal``), also behind
a parked run. What runs later without a token (a retry's backoff elapsing, a cap raised by an
operator, a cap held by a dead process's attempt until the reaper replaces it) is claimed by the
node's periodic pass, as everywhere. A second ``tether dev`` that starts on the same file
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
        self._may_wait = True  # unknown at start: work queued before this process ran
        """Whether queued work may wait for a slot or a cap holder of this process."""
        self._unserved = 0
        """Tokens unserved so far: a claim clears the doubt only if none came meanwhile."""

    def every_token_comes_here(self, alone: Callable[[], bool]) -> None:
        """This process takes every token of the deployment while ``alone()`` holds."""
        self._alone = alone

    def token_unserved(self) -> None:
        """A token found no free slot, or its claim started nothing or failed."""
        self._unserved += 1
        self._may_wait = True

    async def claimed(self, claim: Awaitable[Claim | None], *, token: bool) -> Claim | None:
        """``claim``'s result, noted: a token's claim that starts nothing (or fails) leaves
        work behind; a free slot's claim that finds nothing, alone, clears the doubt."""
        unserved = self._unserved
        try:
            won = await claim
        except BaseException:
            if token:
                self.token_unserved()
            raise
        if won is None:
            if token:
                self.token_unserved()
            elif self._unserved == unserved and self._busy() <= 1:
                self._may_wait = False
        return won

    def claims(self) -> bool:
        """Whether a freed slot claims at once."""
        return self._may_wait or not self._alone()
