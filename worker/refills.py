"""Freed slots' claims: whether a freed slot claims at once, and the claims themselves.

A slot frees when an attempt ends (or parks); its refill claims whatever may run now: work whose
token found no free slot, and work that waited for the ended attempt (its tenant's or the
deployment's cap). In a deployment of many processes, tokens and finishes happen elsewhere too,
so a freed slot always claims. ``tether dev``'s tokens do not wait for a slot: one that found
none because a claim held it (another token's, a freed slot's, the periodic pass's, or the
reserved slots' claim, which may hold unreserved ones too) is not left to the next pass either:
when that claim gives its slot back (it found nothing, or less than it took), the slot claims
again at once (at most once per token dropped).

Where every token of the deployment comes to this process (``tether dev``, the one server of its
file), it knows when that claim would find nothing, and skips it: a lone invocation's refill was
two write transactions out of five (a claim from the known tenants, then a scan), in the way of
the next request. Queued work a refill could start exists only if a token found no free slot,
its claim started nothing (the work waits for a cap or its time) or failed: then the refills
claim until one finds nothing while nothing else holds a cap here (an attempt running, a claim
in flight, an attempt left to recovery), no token went unserved meanwhile, and nothing is
queued at all (a claim that comes up short scans, so its scan found no tenant with queued
work). Work no claim can start yet (a paused tenant's, a session's next, a replacement in its
backoff) keeps them claiming: a token claims whatever runs next, not its own invocation, so
once that work can run it may take the token of another tenant's capped work, which then only a
freed slot's claim starts. A session's next invocation also gets a token of its own when its
turn comes (``Services.after_terminal``), and a replacement one when its backoff ends. What
runs later with no token and no freed slot (a cap raised by an operator while nothing runs, a
cap held by a dead process's attempt until the reaper replaces it) is claimed by the node's
periodic pass, as everywhere. A second ``tether dev`` that starts on the same file signs the
lock file (:func:`tether.worker.wiring.sole_server`): from then on this process's freed slots
always claim, since that one takes tokens too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from tether.store.schema import Claim

log = logging.getLogger(__name__)


class FreedSlots:
    def __init__(self, busy: Callable[[], int], claim: Callable[[], Awaitable[bool]]) -> None:
        self._busy = busy
        """Cap holders of this process: attempts running or left to recovery, claims in flight
        (the one reporting included)."""
        self._claim = claim
        """Takes a free slot and claims with it (:meth:`Runtime.start`); False: nothing started."""
        self._tasks: set[asyncio.Task[None]] = set()
        """Freed slots' claims in flight."""
        self._alone: Callable[[], bool] = lambda: False
        self._none_queued: Callable[[], bool] = lambda: False
        self._may_wait = True  # unknown at start: work queued before this process ran
        """Whether queued work may wait for a slot or a cap holder of this process."""
        self._unserved = 0
        """Tokens unserved so far: a claim clears the doubt only if none came meanwhile."""
        self._kept_out = 0
        """Tokens dropped for lack of a free slot (``tether dev``'s, which do not wait for one)
        that no given-back slot has claimed again for yet."""

    def every_token_comes_here(
        self, alone: Callable[[], bool], none_queued: Callable[[], bool]
    ) -> None:
        """This process takes every token of the deployment while ``alone()`` holds;
        ``none_queued()``: right after a claim that found nothing, whether nothing is queued."""
        self._alone = alone
        self._none_queued = none_queued

    def token_unserved(self) -> None:
        """A token's claim started nothing or failed."""
        self._unserved += 1
        self._may_wait = True

    def token_found_no_slot(self) -> None:
        """A token found no free slot and was dropped."""
        self._kept_out += 1
        self.token_unserved()

    async def claimed(self, claim: Awaitable[Claim | None], *, token: bool) -> Claim | None:
        """``claim``'s result, noted: a token's claim that starts nothing (or fails) leaves
        work behind; a free slot's claim that finds nothing, alone, with nothing queued, clears
        the doubt."""
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
            elif self._unserved == unserved and self._busy() <= 1 and self._none_queued():
                self._may_wait = False
            self.slot_given_back()
        return won

    def slot_given_back(self) -> None:
        """A claim gave its slot back (it found nothing, or less than it took): the slot
        claims again for a token it kept out, if one is left."""
        if self._kept_out > 0:
            self._kept_out -= 1
            self._claim_soon()

    def claims(self) -> bool:
        """Whether a freed slot claims at once."""
        return self._may_wait or not self._alone()

    def slot_freed(self) -> None:
        """A slot freed: claim with it at once if queued work may wait for it."""
        if self.claims():
            self._claim_soon()

    async def settled(self) -> None:
        """Wait for the freed slots' claims in flight, and for those they start in turn (a
        claim that finds nothing claims again for a token it kept out)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _claim_soon(self) -> None:
        task = asyncio.create_task(self._claim_once(), name="refill")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _claim_once(self) -> None:
        try:
            await self._claim()
        except Exception as exc:  # the periodic pass tries again
            log.warning("claiming for a freed slot failed (%s)", type(exc).__name__)
