"""Whether a freed slot claims at once.

A slot frees when an attempt ends (or parks); its refill claims whatever may run now: work whose
token found no free slot, and work that waited for the ended attempt (its session's turn, its
tenant's or the deployment's cap). In a deployment of many processes, tokens and finishes happen
elsewhere too, so a freed slot always claims.

Where every token of the deployment comes to this process (``tether dev``, the one server of its
file), it knows when that claim would find nothing, and skips it: a lone invocation's refill was
two write transactions out of five (a claim from the known tenants, then a scan), in the way of
the next request. Queued work a refill could start exists only if a token found no free slot, or
its claim started nothing (the work waits for a cap, its session's turn, or its time): then the
refills claim until one finds nothing while nothing else runs or is claimed here (then no cap is
held, since only running attempts count against caps). A session's next invocation gets a token
of its own when its turn comes (``Services.after_terminal``), also behind a parked run; what runs
later without a token (a retry's backoff elapsing, a cap raised by an operator) is claimed by the
node's periodic pass, as everywhere.
"""

from __future__ import annotations

from collections.abc import Callable


class FreedSlots:
    def __init__(self, busy: Callable[[], int]) -> None:
        self._busy = busy
        """Attempts running here plus claims in flight (the one reporting included)."""
        self._sole = False
        self._may_wait = True  # unknown at start: work queued before this process ran
        """Whether queued work may wait for a slot or a blocker of this process."""

    def every_token_comes_here(self) -> None:
        """This process is the deployment's only consumer of tokens (``tether dev``)."""
        self._sole = True

    def token_unserved(self) -> None:
        """A token found no free slot, or its claim started nothing."""
        self._may_wait = True

    def started_nothing(self, *, token: bool) -> None:
        """A claim started nothing: a token's (see :meth:`token_unserved`), or one for a free
        slot (a refill, the periodic pass), which clears the doubt if it was alone here."""
        if token:
            self.token_unserved()
        elif self._busy() <= 1:
            self._may_wait = False

    def claims(self) -> bool:
        """Whether a freed slot claims at once."""
        return not self._sole or self._may_wait
