"""Crash detection through the database session: a worker process's liveness thread.

Each worker process holds the advisory lock of its row in ``tether_workers`` on a connection of
its own (:class:`tether.store.liveness.LivenessSession`), beats the row every
``liveness_interval``, and looks at the other workers: PostgreSQL drops a session's locks the
moment the session ends, so a killed process is noticed within about a second instead of after
``stale_after``.

**The rules.** A scanner declares worker W dead when W's lock is not held now and

1. *seen to go*: it saw W's lock held in an earlier scan *on its current session*, and W's last
   liveness beat is older than ``liveness_grace``; or
2. *unwitnessed*: W's last liveness beat is older than ``stale_after``, whatever it saw;

the lock and the beat are judged again, in one statement, when W is marked dead and its
attempts are handed back (:meth:`~tether.store.liveness.LivenessSession.declare_dead`).

Rule 1 is the fast one. Rule 2 takes the workers nobody saw go: every worker killed at once, one
killed within a scan of starting, one killed while every scanner's session was being
re-established; rule 1 alone would leave their rows ``alive`` until ``retention``. It is the
heartbeat rule (``stale_after``) applied to the row: a live worker beats every
``liveness_interval``, through its liveness session or through the store's pool, and one that
could write nothing for ``stale_after`` has stopped its attempts itself and seen them replaced
(by then their own heartbeats are as old). A worker that is starting takes its lock before its
row names it and writes its beat with the row; one re-establishing its session beats through
the pool meanwhile.

**Why a restart, a fail-over or a network blip that drops every session replaces nothing.**
Such an event ends the scanner's own session too; its memory belongs to that session
(:class:`Observer`), so after reconnecting it has seen nobody's lock held. W can only be found
dead later if it re-took its lock on the new server, lost it again, and stopped beating: a new
death, not the outage; or by rule 2, if the outage kept it silent for ``stale_after`` (its
attempts' heartbeats are as old: recovered like a crash in any case) and it has not beaten
again by the time the scanner's new session is ``liveness_grace + 2 × liveness_interval`` old.

**Why a live worker whose liveness session alone was dropped** (``pg_terminate_backend``, an
idle-connection killer, a broken socket) **is not replaced.** It beats every
``liveness_interval``, through its liveness session or, while that is down, through the store's
pool, and it reconnects and re-takes its lock at once; the beat keeps it alive as long as any
beat lands. A process that can reach PostgreSQL through no connection for ``liveness_grace`` *and*
whose session the server dropped is taken for dead; its writes are fenced as for any
replacement, and it stops its attempts when it learns it was replaced.

Frozen processes, hung hosts and half-open connections keep their sessions (and locks): the
heartbeat rule (``stale_after``) replaces their attempts; their rows stay ``alive`` while the
lock is held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import sqlalchemy as sa

from tether.liveness_keepalive import PROBE_INTERVAL, keepalive_for
from tether.settings import Settings
from tether.store.errors import StoreError
from tether.store.liveness import LivenessSession, Registration, Sighting
from tether.store.store import Store

log = logging.getLogger(__name__)
T = TypeVar("T")

SCANNERS = 4
"""Roughly how many workers scan per ``liveness_interval``: with more workers each scans less
often, so reading ``pg_locks`` costs the same however many there are (:func:`scan_every`)."""
WARM_EVERY = 20
"""Every so many ticks the fallback's pooled connection is used, so that it is open when the
liveness session drops at a moment when no new connection can be made (``max_connections``)."""
POOLER = (
    "the liveness connection does not keep its PostgreSQL session (a pooler in transaction mode, "
    "such as PgBouncer?)"
)


def liveness_url(settings: Settings) -> sa.URL:
    """The liveness connection's URL: ``worker.liveness_url`` (else ``database_url``) with TCP
    keepalives and a user timeout, so a connection that died silently (a fail-over to another
    host, a NAT or firewall that forgot it) is noticed within ``stale_after / 2``, and with a
    statement timeout, so no statement ever holds the session for long."""
    url = sa.make_url(settings.worker.liveness_url or settings.database_url)  # both psycopg's
    keepalive = keepalive_for(settings.timers.stale_after)
    ours = f"-c statement_timeout={keepalive.within_ms}"
    options = " ".join(filter(None, [str(url.query.get("options", "")), ours]))
    return url.update_query_dict(
        {
            "application_name": "tether-liveness",
            "connect_timeout": str(keepalive.connect_timeout),
            "keepalives": "1",
            "keepalives_idle": str(keepalive.idle),
            "keepalives_interval": str(PROBE_INTERVAL),
            "keepalives_count": str(keepalive.count),
            "tcp_user_timeout": str(max(1000, keepalive.within_ms)),
            "options": options,
        }
    )


class NameTaken(Exception):
    """Another live process registered this worker's name: this one stays out of the registry
    (writing its row would make the other think it had been declared dead)."""


@dataclass(frozen=True, slots=True)
class Death:
    """A worker a scan shows dead, and by which rule of the module's docstring."""

    sighting: Sighting
    seen_to_go: bool
    """Rule 1: dead once silent for ``liveness_grace``; else rule 2: for ``stale_after``."""


def scan_every(sightings: Iterable[Sighting]) -> int:
    """Scan once in so many ticks: the workers holding their lock (the scanners) over
    :data:`SCANNERS`. Rows without a lock are not counted: a dead worker's row, until rule 2
    takes it, would slow the finding of every other death."""
    return max(1, sum(1 for s in sightings if s.held) // SCANNERS)


class Observer:
    """Who died, judged from the scans of one scanner (pure: no I/O).

    It remembers which locks it saw held, and forgets them whenever the scanner's session
    changes (:meth:`new_session`), which is what makes an outage of the server harmless. Rule 2
    waits ``settle`` seconds into each session of the scanner: after an outage every beat is
    old, and the other workers need a moment to reconnect and beat again before their silence
    means anything (else the first one back would declare the rest dead, and each would hand
    back the attempts it had claimed since).
    """

    def __init__(self, me: str, settle: float = 0.0) -> None:
        self._me = me
        self._settle = settle
        self._session_began = 0.0
        self._seen_held: set[tuple[str, int]] = set()

    def new_session(self, now: float = 0.0) -> None:
        self._seen_held.clear()
        self._session_began = now

    def judge(self, sightings: Iterable[Sighting], now: float = 0.0) -> list[Death]:
        """The workers this scan (at ``now``, on the clock of :meth:`new_session`) shows dead
        (rules 1 and 2 of the module's docstring)."""
        settled = now - self._session_began >= self._settle
        dead: list[Death] = []
        present: set[tuple[str, int]] = set()
        for sighting in sightings:
            key = (sighting.name, sighting.lock_id)
            if sighting.name == self._me:
                continue
            present.add(key)
            if sighting.held:
                self._seen_held.add(key)
            elif key in self._seen_held and sighting.silent:
                dead.append(Death(sighting, seen_to_go=True))
            elif sighting.stale and settled:
                dead.append(Death(sighting, seen_to_go=False))
        self._seen_held &= present
        return dead


class Liveness(threading.Thread):
    """Registers this process, holds its lock, beats, and finds dead workers; from a thread of
    its own, so a blocked event loop cannot make a live process look dead."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: Store,
        name: str,
        found_dead: Callable[[], None],
        declared_dead: Callable[[], None],
    ) -> None:
        super().__init__(name="tether-liveness", daemon=True)
        self._url = liveness_url(settings)
        self._store = store
        self._name = name
        self._found_dead = found_dead
        self._declared_dead = declared_dead
        timers = settings.timers
        self._interval = timers.liveness_interval
        self._grace = timers.liveness_grace
        self._stale_after = timers.stale_after
        self._timeout = timers.stale_after / 2
        self._stopping = threading.Event()
        # rule 2 once a peer has had two beats and the grace to reconnect after an outage
        self._observer = Observer(name, settle=self._grace + 2 * self._interval)
        self._session: LivenessSession | None = None
        self._registration: Registration | None = None
        self._session_only = True  # until a pooler or a namesake says otherwise
        self._scan_every = 1
        self._until_scan = 0
        self._connect_failures = 0
        self._ticks = 0
        self.registered = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        loop = asyncio.new_event_loop()
        fallback = self._store.sibling()
        try:
            loop.run_until_complete(self._tick(fallback))
            while not self._stopping.wait(self._interval * random.uniform(0.9, 1.1)):
                loop.run_until_complete(self._tick(fallback))
            loop.run_until_complete(self._unregister())
        except NameTaken:
            log.error(
                "worker %s: a live process already uses this name (two hosts with one hostname?): "
                "crash detection through the session is off for this process; a dead worker is "
                "found by its heartbeats after stale_after",
                self._name,
            )
        finally:
            loop.run_until_complete(fallback.close())
            loop.close()

    async def _tick(self, fallback: Store) -> None:
        self._ticks += 1
        if self._ticks % WARM_EVERY == 0:  # keep the fallback's pooled connection open
            with contextlib.suppress(StoreError, TimeoutError):
                await self._bounded(fallback.ping())
        try:
            if self._session is None:
                await self._connect()
            else:
                await self._bounded(self._beat())
            await self._bounded(self._maybe_scan())
        except (StoreError, TimeoutError) as exc:
            await self._lost(exc, fallback)
        except NameTaken:
            raise
        except Exception as exc:  # never let the thread die: the process would look dead
            log.exception("liveness check failed unexpectedly")
            await self._lost(exc, fallback)

    async def _bounded(self, work: Awaitable[T]) -> T:
        return await asyncio.wait_for(work, self._timeout)

    async def _connect(self) -> None:
        session = await self._bounded(LivenessSession.open(self._url))
        try:
            registration = await self._bounded(self._register(session))
        except BaseException:
            await session.close()
            raise
        self._session, self._registration = session, registration
        self._observer.new_session(time.monotonic())
        self._connect_failures = 0
        self._ticks = 0
        self.registered.set()

    async def _register(self, session: LivenessSession) -> Registration:
        fresh = self._registration is None
        previous = None if fresh else self._registration
        lock_id: int | None = None
        problem = ""
        if fresh and await self._namesake_lives(session):
            raise NameTaken(self._name)
        if self._session_only:
            if not await session.keeps_its_session():
                problem = POOLER
            else:
                wanted = previous.lock_id if previous is not None else None
                lock_id = await session.take_lock(wanted)
                problem = "" if lock_id is not None else POOLER
        if problem and self._session_only:
            self._session_only = False
            log.warning(
                "worker %s: %s: crash detection through the session is off for this process; a "
                "dead worker is found by its heartbeats after stale_after. Point "
                "worker.liveness_url at PostgreSQL directly (or at a pool in session mode) to "
                "turn it on.",
                self._name,
                problem,
            )
        if not await session.enrol(self._name, lock_id, fresh=fresh):
            log.error("worker %s: declared dead while its liveness session was down", self._name)
            self._declared_dead()
            await session.enrol(self._name, lock_id, fresh=True)
        if fresh or previous is None or previous.lock_id != lock_id:
            log.info(
                "worker %s: liveness lock %s held by backend %d",
                self._name,
                lock_id,
                session.backend_pid,
            )
        return Registration(self._name, lock_id, session.backend_pid, problem)

    async def _namesake_lives(self, session: LivenessSession) -> bool:
        """An earlier process of the same name (a container restarted with the same pid): its
        attempts are handed back; True if it still lives (two hosts with one hostname)."""
        predecessor = await session.predecessor(self._name)
        if predecessor is None:
            return False
        if predecessor.lock_held:
            return True
        released = await session.release_attempts_of(self._name)
        if released:
            log.warning(
                "worker %s: handed back %d attempts of an earlier process of the same name",
                self._name,
                released,
            )
            self._found_dead()
        return False

    async def _beat(self) -> None:
        assert self._session is not None and self._registration is not None
        backend = await self._session.beat(self._name, self._registration.lock_id)
        if backend is None:
            log.error("worker %s: declared dead by another worker; re-registering", self._name)
            self._declared_dead()  # once: its attempts are handed back
            # this session still holds the lock: the row says alive again, and nothing else
            await self._session.enrol(self._name, self._registration.lock_id, fresh=True)
        elif backend != self._session.backend_pid and self._registration.lock_id is not None:
            raise StoreError(f"the liveness session moved to backend {backend} ({POOLER})")

    async def _maybe_scan(self) -> None:
        if self._session is None or not self._session_only:
            return
        self._until_scan -= 1
        if self._until_scan > 0:
            return
        scan = await self._session.scan(self._grace, self._stale_after)
        if scan.scanner_pid != self._session.backend_pid:
            raise StoreError(f"the liveness session moved to backend {scan.scanner_pid}")
        self._scan_every = scan_every(scan.sightings)
        self._until_scan = random.randint(1, self._scan_every)
        found = 0
        for death in self._observer.judge(scan.sightings, time.monotonic()):
            sighting = death.sighting
            grace = self._grace if death.seen_to_go else self._stale_after
            died, released = await self._session.declare_dead(
                sighting.name, sighting.lock_id, grace
            )
            if died:
                found += 1
                log.warning(
                    "worker %s: %s: dead; %d attempts handed back for replacement",
                    sighting.name,
                    "its session ended and it stopped beating"
                    if death.seen_to_go
                    else f"no lock held and no beat for {grace:g}s",
                    released,
                )
        if found:
            self._found_dead()

    async def _lost(self, exc: BaseException, fallback: Store) -> None:
        """The liveness session failed (or could not be opened): beat through the pool
        meanwhile, and reconnect at once, then on every tick until it works."""
        dropped = self._session is not None
        if self._session is not None:
            log.warning("worker %s: liveness connection lost (%s); reconnecting", self._name, exc)
            session, self._session = self._session, None
            self._observer.new_session(time.monotonic())
            await session.close()
        else:
            self._connect_failures += 1
            if self._connect_failures in (1, 100):  # once, and again if it never works
                log.warning("worker %s: no liveness connection (%s); retrying", self._name, exc)
        if self._registration is not None:
            # when no connection works either, the heartbeat rule decides, as before
            with contextlib.suppress(StoreError, TimeoutError):
                await self._bounded(fallback.registry.beat(self._name, self._registration.lock_id))
        if dropped and not self._stopping.is_set():
            try:
                await self._connect()
            except (StoreError, TimeoutError) as again:
                log.debug("liveness reconnect failed (%s)", again)

    async def _unregister(self) -> None:
        if self._session is None or self._registration is None:
            return
        try:
            await asyncio.wait_for(
                self._session.unregister(self._name, self._registration.lock_id), self._timeout
            )
        except (StoreError, TimeoutError) as exc:
            log.warning("worker %s: could not unregister (%s)", self._name, exc)
        finally:
            await self._session.close()
