"""Claims for reserved slots: tenants with nothing running start at once, even while every
other slot is busy with another tenant's flood (``worker.reserve``, :mod:`tether.worker.slots`).

One such claim is in flight at a time; slots asked for meanwhile are claimed right after it.
A claim takes up to the slots asked for (reserved or not), starts at most one invocation of each
tenant with nothing running (the store's ``newcomers`` claim) and gives back what it did not use.
An unreserved slot it held may have kept a token out (``tether dev``'s tokens do not wait for
one): each unreserved slot it gives back claims again while such a token is counted
(:meth:`FreedSlots.slot_given_back`); a reserved one cannot have kept a token out.

Under a burst from many owners every tenant starts with nothing running, and such claims came
between the tokens' claims, each starting a few invocations in a transaction of its own. So the
tokens' claim about to run borrows the free reserved slots (:meth:`NewcomerClaims.lending`) and
starts in them, in its own transaction, tenants with nothing running that its own slots left
out; while it holds them, an announcement's claim waits for it to end, and runs then unless
another tokens' claim is about to borrow them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from tether.store.schema import Claim
from tether.store.store import Store
from tether.worker.refills import FreedSlots
from tether.worker.running import RunningAttempt
from tether.worker.slots import Slots

log = logging.getLogger(__name__)


class NewcomerClaims:
    def __init__(
        self,
        slots: Slots,
        store: Store,
        worker: str,
        begin: Callable[[Claim], None],
        running: Callable[[], Iterable[RunningAttempt]],
        freed: FreedSlots,
        *,
        another: Callable[[], bool] = lambda: False,
        closing: Callable[[], bool] = lambda: False,
    ) -> None:
        self._slots = slots
        self._store = store
        self._worker = worker
        self._begin = begin
        self._running = running
        self._freed = freed
        """Told of each attempt started, and of each unreserved slot given back: a token it
        kept out is claimed for."""
        self._another = another
        """Whether another tokens' claim is about to run (it reads the tenants announced)."""
        self._closing = closing
        self._task: asyncio.Task[int] | None = None
        self._again = 0
        """Slots asked for while a claim was in flight."""
        self._among: set[str] = set()
        """The announced tenants the next claim is for, read alone (a claim's read and
        allocation cost grows with the tenants it weighs)."""
        self._tokens_claiming = 0
        """Tokens' claims in flight: an announcement meanwhile is claimed for when one ends."""
        self._whole_list = False
        """Whether the next claim reads this process's whole tenant list (the periodic pass's,
        or one asked for with no tenants named)."""

    def announced(self, tenants: list[str]) -> None:
        """A gateway announced new work of ``tenants``: with only reserved slots free, claim
        for those with nothing running here (with an unreserved slot free, the tokens' own
        claims take the work)."""
        if not self._slots.open_to_tokens:
            here = self._tenants_here()
            self._among |= set(tenants) - here
            if not self._tokens_claiming or not self._many_waiting(here):
                self.want(len(self._among))  # all named so far: a claim in flight's too

    def after_pass(self) -> None:
        """The periodic pass claimed for the unreserved slots; with only reserved ones free, a
        tenant whose announcement was lost starts here, if this process's tenant list names one
        with nothing running here (else the claim would read nothing)."""
        if not self._slots.open_to_tokens and self._store.may_have_newcomers(self._tenants_here()):
            self._whole_list = True
            self.want(self._slots.free)

    async def lending(
        self, claim: Callable[[int], Awaitable[list[Claim]]], count: int
    ) -> list[Claim]:
        """Run the tokens' claim of ``count`` with the free reserved slots lent to it:
        ``claim(lent)`` starts up to ``count`` invocations and then up to ``lent`` of tenants
        with nothing running (:meth:`Store.claim_next`'s ``reserved``), begun here. Returns
        those in its own slots."""
        lent = self._lend()
        claimed: list[Claim] = []
        self._tokens_claiming += 1
        try:
            claimed = await claim(lent)
        finally:
            self._tokens_claiming -= 1
            self._repaid(lent, claimed[:count], claimed[count:])
        return claimed[:count]

    def _lend(self) -> int:
        """The free reserved slots, for a tokens' claim; none while closing or this process's
        own newcomers' claim is in flight, while a slot tokens may take is free, or when its
        tenant list names no tenant but those running here."""
        if self._closing() or (self._task is not None and not self._task.done()):
            return 0
        if self._slots.open_to_tokens or not self._slots.reserve:
            return 0
        if not self._store.may_have_newcomers(self._tenants_here()):
            return 0
        return self._slots.take_reserved(self._slots.reserve)

    def _repaid(self, lent: int, won: list[Claim], extra: list[Claim]) -> None:
        """The tokens' claim that borrowed ``lent`` slots ended, having started ``won`` in its
        own slots and ``extra`` in the borrowed ones (begun here); the rest are given back (one
        that is unreserved claims: a slot freed meanwhile found none free). The tenants it
        started are served; for the others announced, with only reserved slots free, a claim
        starts now, unless another tokens' claim is about to run and read them."""
        self._begin_all(extra)
        self._give_back(lent - len(extra))
        if self._among:
            self._among -= {claim.tenant for claim in won} | {claim.tenant for claim in extra}
        if self._among and not self._slots.open_to_tokens and not self._another():
            self.want(len(self._among))

    def want(self, wanted: int) -> None:
        """Claim up to ``wanted`` slots for tenants with nothing running, now or right after
        the claim in flight."""
        if wanted <= 0 or self._closing():
            return
        if self._task is not None and not self._task.done():
            self._again = max(self._again, wanted)
            return
        self._task = asyncio.create_task(self._run(wanted), name="newcomers")

    async def settled(self) -> None:
        """Wait for the claim in flight, if any."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self, wanted: int) -> int:
        started = 0
        while wanted > 0:
            taken = 0
            while taken < wanted and self._slots.try_take_reserved():
                taken += 1
            if not taken:
                break
            won: list[Claim] = []
            try:
                among = None if self._whole_list or not self._among else sorted(self._among)
                self._among, self._whole_list = set(), False
                won = await self._store.claim_next(taken, self._worker, newcomers=True, among=among)
            except Exception as exc:  # the node's periodic pass asks again
                log.warning(
                    "claiming for tenants with nothing running failed (%s)", type(exc).__name__
                )
            self._give_back(taken - len(won))
            if among is not None and taken < len(among):  # short of slots: the rest stay named
                self._among |= set(among) - {claim.tenant for claim in won}
            self._begin_all(won)
            started += len(won)
            wanted, self._again = self._again, 0
        return started

    def _give_back(self, slots: int) -> None:
        """Give back slots a claim took and did not use; an unreserved one claims (it may have
        kept a token out, or a slot freed meanwhile found none free)."""
        for _ in range(slots):
            if self._slots.give():
                self._freed.slot_given_back()

    def _begin_all(self, claims: list[Claim]) -> None:
        """Run what a claim started in the slots it took (its tokens owe nothing more)."""
        for claim in claims:
            self._freed.started(claim.invocation_id)
            self._begin(claim)

    def _many_waiting(self, here: set[str]) -> bool:
        """Whether more tenants with nothing running here may wait than there are reserved
        slots (a burst from many owners): the reserved slots cannot start them all at once, and
        the tokens' claims start them first in the order of service. An announcement during a
        tokens' claim then waits for it to end (:meth:`lending`) rather than claim beside it.
        With few (one tenant's flood, another's first invocation), it claims at once, in the
        reserved slots the claim in flight did not borrow (else when that claim ends)."""
        return self._store.may_have_newcomers(here, more_than=self._slots.reserve)

    def _tenants_here(self) -> set[str]:
        return {attempt.claim.tenant for attempt in self._running()}
