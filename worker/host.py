"""Hosts a worker node on an event loop thread inside each Dramatiq worker process.

Dramatiq's threads only hand invocation ids over: an actor call waits for a free concurrency
slot and the claim, then returns while the attempt runs on the loop. So one process runs up to
``worker.concurrency`` invocations, whatever its thread count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import dramatiq

from shared.app import load_app
from shared.broker import run_invocation_message
from shared.node import reaper_for, run_node
from shared.pubsub import RedisPubSub
from shared.reaper import ReapReport
from shared.runtime import Runtime
from shared.settings import Settings
from shared.store.store import Store

log = logging.getLogger(__name__)
T = TypeVar("T")


class NodeHost(dramatiq.Middleware):
    """Opens the node in ``before_worker_boot`` and drains it in ``after_worker_shutdown``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop: asyncio.AbstractEventLoop | None = None
        self.runtime: Runtime | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._broker: dramatiq.Broker | None = None

    def before_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._broker = broker
        self._thread = threading.Thread(target=self._serve, name="tether-node", daemon=True)
        self._thread.start()
        if not self._ready.wait(60) or self.runtime is None:
            raise RuntimeError("the worker node did not start (see the log above)")

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(self.settings.timers.shutdown_grace + 15)

    def _serve(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:
            log.exception("worker node stopped")
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = load_app(self.settings.app)
        store = Store.postgres(self.settings.database_url)
        pubsub = RedisPubSub(self.settings.redis_url)
        try:
            async with run_node(
                settings=self.settings, store=store, pubsub=pubsub, app=app, enqueue=self.enqueue
            ) as runtime:
                self.runtime = runtime
                self._ready.set()
                await self._stop.wait()
        finally:
            self.runtime = None
            await pubsub.close()
            await store.close()

    async def enqueue(self, invocation_id: str, delay: float) -> None:
        assert self._broker is not None
        message = run_invocation_message(self.settings.worker.queue, invocation_id)
        await asyncio.to_thread(self._broker.enqueue, message, delay=int(delay * 1000) or None)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the node's loop from a Dramatiq thread and wait for its result."""
        if self.loop is None:
            coro.close()
            raise RuntimeError("the worker node is not running")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def start_invocation(self, invocation_id: str) -> bool:
        runtime = self.runtime
        if runtime is None:
            return False
        return self.call(runtime.start(invocation_id))

    def reap(self) -> ReapReport | None:
        with contextlib.suppress(RuntimeError):
            if self.runtime is not None:
                return self.call(reaper_for(self.settings, self.runtime).reap_once())
        return None
