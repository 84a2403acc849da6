"""Claims for reserved slots: tenants with nothing running start at once, even while every
other slot is busy with another tenant's flood (``worker.reserve``, :mod:`tether.worker.slots`).

One such claim is in flight at a time; slots asked for meanwhile are claimed right after it.
A claim takes up to the slots asked for (reserved or not), starts at most one invocation of each
tenant with nothing running (the store's ``newcomers`` claim) and gives back what it did not use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from tether.store.schema import Claim
from tether.worker.slots import Slots

log = logging.getLogger(__name__)


class NewcomerClaims:
    def __init__(
        self,
        slots: Slots,
        claim: Callable[[int], Awaitable[list[Claim]]],
        begin: Callable[[Claim], None],
    ) -> None:
        self._slots = slots
        self._claim = claim
        self._begin = begin
        self._task: asyncio.Task[int] | None = None
        self._again = 0
        """Slots asked for while a claim was in flight."""

    def want(self, wanted: int) -> None:
        """Claim up to ``wanted`` slots for tenants with nothing running, now or right after
        the claim in flight."""
        if wanted <= 0:
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
                won = await self._claim(taken)
            except Exception as exc:  # the node's periodic pass asks again
                log.warning(
                    "claiming for tenants with nothing running failed (%s)", type(exc).__name__
                )
            for _ in range(taken - len(won)):
                self._slots.give()
            for claim in won:
                self._begin(claim)
            started += len(won)
            wanted, self._again = self._again, 0
        return started
