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
file), it knows when that claim would find nothing, and skips it: a lone invocation's refill was two
write transactions out of five (a claim from the known tenants, then a scan), in the way of the next
request, and under a burst half the invocations a claim asked for were found by nobody (the tokens'
claims and the refills' took the same queued work twice over). Queued work a refill could start
exists only if an invocation whose token came has not started here: its token found no free slot,
its claim started nothing (the work waits for a cap or its time) or failed, or it started another
invocation (a token claims whatever runs next, not its own). The process keeps those invocations
(*owed*) and the tokens' claims in flight (each starts one, if one can run); a freed slot claims
while more are owed than those claims will start, and a freed slot that did not claim claims as soon
as one of them ends leaving more owed than the rest will start. At start, work queued before this
process ran may wait as well: the refills claim until one finds nothing while nothing else holds a
cap here (an attempt running, a claim in flight, an attempt left to recovery), no token went
unserved meanwhile, and nothing is queued at all (a claim that comes up short scans, so its scan
found no tenant with queued work); that also forgets every owed invocation (one cancelled while
queued is owed until then, and so is a session's next whose second token, sent when its turn came,
arrives after a freed slot started it). Work no claim can start yet (a paused tenant's, a session's
next, a replacement in its backoff) stays owed and keeps them claiming. A session's next invocation
also gets a token of its own when its turn comes (``Services.after_terminal``), and a replacement
one when its backoff ends. What runs later with no token and no freed slot (a cap raised by an
operator while nothing runs, a cap held by a dead process's attempt until the reaper replaces it) is
claimed by the node's periodic pass, as everywhere. A second ``tether dev`` that starts on the same
file signs the lock file (:func:`tether.worker.wiring.sole_server`): from then on this process's
freed slots always claim, since that one takes tokens too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from tether.repeated import Repeated
from tether.store.schema import Claim

log = logging.getLogger(__name__)

LATE_TOKEN_WINDOW = 1.0
"""Seconds after an invocation started before its token came within which that token is taken
for the one its accept sent (it owes nothing); later, for a new start of it (a resume)."""
OWED_REMEMBERED = 4096
"""Owed invocations kept at most: past it (a backlog, or ones no claim will start: cancelled
while queued), they are forgotten and freed slots claim until one finds nothing with nothing
queued, as at start."""
UNTOKENED_REMEMBERED = 4096
"""Invocations started before their token came that :class:`FreedSlots` remembers at most."""


class FreedSlots:
    def __init__(
        self, busy: Callable[[], int], claim: Callable[[], Awaitable[bool | None]]
    ) -> None:
        self._busy = busy
        """Cap holders of this process: attempts running or left to recovery, claims in flight
        (the one reporting included)."""
        self._claim = claim
        """Takes a free slot and claims with it (:meth:`Runtime.claim_freed_slot`); False:
        nothing started, None: no slot was free."""
        self._tasks: set[asyncio.Task[None]] = set()
        """Freed slots' claims in flight."""
        self._failed = Repeated(log)  # a store that is down fails every freed slot's claim
        self._alone: Callable[[], bool] = lambda: False
        self._none_queued: Callable[[], bool] = lambda: False
        self._may_wait = True  # unknown at start: work queued before this process ran
        """Whether work queued before this process ran may still wait (cleared by a claim
        that finds nothing, alone, with nothing queued)."""
        self._owed: dict[str, None] | None = None
        """Where every token comes here: the invocations whose token came and which no claim
        of this process has started yet (a token claims whatever runs next, so its own
        invocation may still be queued after its claim). None where tokens go elsewhere too."""
        self._started_untokened: dict[str, float] = {}
        """When invocations started here before their token came (another token's claim or a
        freed slot's took them first, between their accept and their token): that token, if
        it comes within :data:`LATE_TOKEN_WINDOW` s, owes nothing."""
        self._token_claims = 0
        """Tokens' claims in flight: each starts one owed invocation, if one can run."""
        self._declined = 0
        """Freed slots that did not claim because tokens' claims in flight stood for the
        invocations owed; one claims for each such claim that leaves one behind."""
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
        self._owed = {}

    def token_unserved(self) -> None:
        """A token's claim started nothing or failed (its invocation stays owed)."""
        self._unserved += 1

    def token_found_no_slot(self, invocation_id: str) -> None:
        """The token of ``invocation_id`` found no free slot and was dropped."""
        self._kept_out += 1
        self._token_came(invocation_id)
        self.token_unserved()

    def started(self, invocation_id: str) -> None:
        """A claim of this process started ``invocation_id`` (:meth:`claimed` notes its own;
        the reserved slots' claims tell it here): its token owes nothing more."""
        owed = self._owed
        if owed is None:
            return
        if invocation_id in owed:
            del owed[invocation_id]
            if not owed and not self._may_wait:
                self._declined = 0  # nothing left that a slot held back for
            return
        untokened = self._started_untokened
        untokened[invocation_id] = time.monotonic()
        if len(untokened) > UNTOKENED_REMEMBERED:
            del untokened[next(iter(untokened))]

    async def claimed(self, claim: Awaitable[Claim | None], token: str) -> Claim | None:
        """``claim``'s result, noted (``token``: the invocation id of the token claiming, or
        ""): a token's claim that starts nothing (or fails) leaves work behind; a free slot's
        claim that finds nothing, alone, with nothing queued, clears the doubt."""
        unserved = self._unserved
        if token:
            self._token_came(token)
            self._token_claims += 1
        try:
            won = await claim
        except BaseException:
            if token:
                self._token_claim_ended(None)
            raise
        if won is not None:
            self.started(won.invocation_id)
        if token:
            self._token_claim_ended(won)
        elif won is None and self._unserved == unserved and self._none_waits():
            self._may_wait = False
            self._declined = self._kept_out = 0
            if self._owed is not None:
                self._owed.clear()  # nothing is queued: none of them is owed
        if won is None:
            self._claim_again(held_back_too=False)
        return won

    def _token_claim_ended(self, won: Claim | None) -> None:
        """A token's claim ended: if it left more invocations owed than the tokens' claims
        still in flight will start, a slot freed meanwhile that did not claim claims now."""
        self._token_claims -= 1
        if won is None:
            self.token_unserved()
        if self._declined and self._owed and self.claims():
            self._declined -= 1
            self._claim_soon()

    def slot_given_back(self) -> None:
        """A reserved slots' claim, or a tokens' claim that borrowed them, gave an unreserved
        slot back (it took more than it used, or a slot freed while it held the rest): where
        tokens go elsewhere too, it claims, as a freed slot does (one freed meanwhile may have
        found no slot free: this one was held); alone, for a token it kept out, or for a freed
        slot that held back or found no slot."""
        if self._owed is None:
            self._claim_soon()
        else:
            self._claim_again(held_back_too=True)

    def _claim_again(self, *, held_back_too: bool) -> None:
        """A claim gave its slot back: it claims again, while work is owed, for a token it
        kept out, if one is left (and for a freed slot that held back, if asked)."""
        if self._kept_out > 0:
            self._kept_out -= 1
        elif held_back_too and self._declined > 0:
            self._declined -= 1
        else:
            return
        if self.claims():
            self._claim_soon()
        elif self._owed:  # tokens' claims in flight stand for it: if one leaves it, claim
            self._declined += 1

    def claims(self) -> bool:
        """Whether a freed slot claims at once: where tokens go elsewhere too, always; alone,
        while work from before may wait, or more invocations are owed than tokens' claims in
        flight will start."""
        if self._owed is None or self._may_wait:
            return True
        if not self._alone():
            self._owed = None  # a second server takes tokens too, from now on
            return True
        return len(self._owed) > self._token_claims

    def slot_freed(self) -> None:
        """A slot freed: claim with it at once if queued work may wait for it; if only
        tokens' claims in flight stand for that work, once one of them leaves it behind."""
        if self.claims():
            self._claim_soon()
        elif self._owed:
            self._declined += 1

    async def settled(self) -> None:
        """Wait for the freed slots' claims in flight, and for those they start in turn (a
        claim that finds nothing claims again for a token it kept out)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _none_waits(self) -> bool:
        """Right after a claim found nothing: nothing else holds a cap here, nothing queued."""
        return self._busy() <= 1 and self._none_queued()

    def _token_came(self, invocation_id: str) -> None:
        if self._owed is None:
            return
        started = self._started_untokened.pop(invocation_id, None)
        if started is not None and time.monotonic() - started <= LATE_TOKEN_WINDOW:
            return
        if len(self._owed) >= OWED_REMEMBERED:  # a backlog: freed slots claim until it is gone
            self._owed.clear()
            self._may_wait = True
        self._owed[invocation_id] = None  # (a later start of it needs this token: a resume)

    def _claim_soon(self) -> None:
        task = asyncio.create_task(self._claim_once(), name="refill")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _claim_once(self) -> None:
        try:
            started = await self._claim()
            if started is None and self._owed is not None and (self._owed or self._may_wait):
                self._declined += 1  # alone: a slot given back later claims in its place
        except Exception as exc:  # the periodic pass tries again
            self._failed.warning("claiming for a freed slot failed (%s)", type(exc).__name__)
