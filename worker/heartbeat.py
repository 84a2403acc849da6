"""Heartbeats from a thread of their own, so a handler that blocks its event loop still beats.

One statement per interval covers every attempt the process runs, judged on the database clock.
An attempt the statement no longer matches was superseded and is stopped at once; a cancel
request noticed here is the fallback when the pub/sub wake-up was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time

from tether.repeated import Repeated
from tether.store.store import Store, StoreError
from tether.worker.runtime import Runtime, StopReason

log = logging.getLogger(__name__)


class Heartbeat(threading.Thread):
    def __init__(
        self,
        *,
        store: Store,
        runtime: Runtime,
        loop: asyncio.AbstractEventLoop,
        interval: float,
        stale_after: float,
    ) -> None:
        super().__init__(name="tether-heartbeat", daemon=True)
        self._store = store
        self._runtime = runtime
        self._loop = loop
        self._interval = interval
        self._stale_after = stale_after
        self._stopping = threading.Event()
        self._failed = Repeated(log)  # a store that is down fails every beat

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        loop = asyncio.new_event_loop()
        store = self._store.sibling()
        last_ok = time.monotonic()
        beat: asyncio.Task[bool] | None = None
        try:
            while not self._stopping.wait(self._interval):
                if beat is None:
                    beat = loop.create_task(self._beat(store))
                # A beat that hangs (a server or a network that stopped answering, no error)
                # is waited for only until the attempts would go stale, then left pending: the
                # stale check below must run all the same, or they run beside their replacements.
                left = self._stale_after - (time.monotonic() - last_ok)
                loop.run_until_complete(asyncio.wait({beat}, timeout=max(0.0, left) + 0.1))
                if beat.done():
                    ok, beat = not beat.cancelled() and beat.result(), None
                    if ok:
                        last_ok = time.monotonic()
                        continue
                if time.monotonic() - last_ok > self._stale_after:
                    log.error("no heartbeat for %.0fs: stopping every attempt", self._stale_after)
                    self._call(self._runtime.stop_all, StopReason.SUPERSEDED)
                    if beat is not None:  # hung: the next beat tries on another connection
                        beat.add_done_callback(lambda t: t.cancelled() or t.exception())
                        beat.cancel()
                        beat = None
        finally:
            if beat is not None:
                beat.cancel()
                loop.run_until_complete(asyncio.wait({beat}, timeout=1.0))
            loop.run_until_complete(store.close())
            loop.close()

    async def _beat(self, store: Store) -> bool:
        owned = self._runtime.owned()
        claiming = self._runtime.claiming()
        if not owned and not claiming:
            return True
        try:
            alive = await store.heartbeat(
                owned, claiming, self._runtime.name, self._runtime.abandoned()
            )
        except StoreError as exc:
            self._failed.warning("heartbeat failed (%s)", exc)
            return False
        except Exception:  # never let the thread die: the attempts would be replaced meanwhile
            log.exception("heartbeat failed unexpectedly")
            return False
        for invocation_id, attempt in owned:
            if invocation_id not in alive:
                self._call(self._runtime.stop, invocation_id, StopReason.SUPERSEDED, attempt)
            elif alive[invocation_id]:
                self._call(self._runtime.stop, invocation_id, StopReason.CANCEL, attempt)
        return True

    def _call(self, fn: object, *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: the process is going away
            self._loop.call_soon_threadsafe(fn, *args)  # type: ignore[arg-type]
