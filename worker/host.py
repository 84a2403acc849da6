"""Hosts a worker node on an event loop thread inside each Dramatiq worker process.

Dramatiq's threads only hand tokens over: an actor call takes a free concurrency slot for each of
its message's tokens (waiting for one only when none is free), then returns while the loop claims
the next fair invocation with each and runs the attempts. So one process runs up to
``worker.concurrency`` invocations, whatever its thread count.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from types import FrameType
from typing import Any

import dramatiq
import sqlalchemy as sa

from tether import loops
from tether.app import load_app
from tether.logs import flush_logs
from tether.parent_watch import ParentWatch
from tether.repeated import Repeated
from tether.settings import Settings
from tether.worker.broker_watch import watching_broker
from tether.worker.node import run_node
from tether.worker.parent_watch import stop_gracefully, write_output_to_own_stderr
from tether.worker.runtime import Runtime
from tether.worker.wiring import distributed_services

log = logging.getLogger(__name__)


REPEAT_SIGNAL_WINDOW = 1.0
"""A stop signal this soon after the first one is the same stop delivered twice."""


class _FirstStopOnly:
    """Dramatiq's worker process takes a second SIGTERM as "exit now, skip the drain". A SIGTERM
    sent to the whole process group (systemd's default, ``kill -- -PGID``) reaches every worker
    process twice: directly, and forwarded by Dramatiq's main process a moment later. This
    handler passes the first on and drops repeats within ``REPEAT_SIGNAL_WINDOW``, so a group
    stop still drains; a repeat sent later still means "exit now"."""

    def __init__(self, handlers: dict[int, Callable[[int, FrameType | None], Any]]) -> None:
        self._handlers = handlers
        self._first: float | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self._first is not None and now - self._first < REPEAT_SIGNAL_WINDOW:
            return
        self._first = self._first if self._first is not None else now
        self._handlers[signum](signum, frame)

    @classmethod
    def install(cls) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread (not a worker process)
        handlers = {}
        for stop_signal in (signal.SIGTERM, signal.SIGHUP):
            current = signal.getsignal(stop_signal)
            if callable(current):
                handlers[int(stop_signal)] = current
        if handlers:
            dedup = cls(handlers)
            for signum in handlers:
                signal.signal(signum, dedup)


def worker_database_url(settings: Settings) -> str:
    """The database URL of a worker process: PostgreSQL ends any transaction the worker leaves
    idle for a third of ``stale_after``.

    A handler that blocks the event loop (``time.sleep``, heavy CPU) while another attempt's write
    is mid-transaction, or a process frozen there, holds that invocation's row lock for as long as
    it is stuck. The heartbeat thread's one statement for every attempt of the process queues
    behind the lock, so the process's other attempts go stale and are replaced while it lives;
    every reaper pass queues behind it too. Ended by the server, the transaction rolls back and its
    writer retries on a new connection (events are re-buffered, finishes retried), and the
    heartbeat goes through well within ``stale_after``.
    """
    url = sa.make_url(settings.database_url)
    if url.get_backend_name() != "postgresql":
        return settings.database_url
    timeout_ms = max(1, int(settings.timers.stale_after * 1000 / 3))
    existing = url.query.get("options", "")
    # No JIT: a worker's statements are short, and the claim's heads join is priced past
    # jit_above_cost at a large backlog (docs/performance.md, "Claiming at 500k queued").
    ours = f"-c idle_in_transaction_session_timeout={timeout_ms} -c jit=off"
    options = " ".join(filter(None, [str(existing), ours]))
    return url.update_query_dict({"options": options}).render_as_string(hide_password=False)


def _on_loop(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, Any]) -> bool:
    """Run ``work`` on ``loop`` from another thread, without waiting; False if the loop is
    closed (then ``work`` is closed unrun)."""
    try:
        asyncio.run_coroutine_threadsafe(work, loop)
    except RuntimeError:
        work.close()
        return False
    return True


NODE_FAILED = 3
"""A worker process's exit status when its node did not start (Dramatiq's 'connection failed'),
which ``tether worker`` exits with in turn."""


class NodeHost(dramatiq.Middleware):
    """Opens the node in ``before_worker_boot`` and drains it in ``after_worker_shutdown``; in
    between, the process stops itself gracefully if its parent dies (:mod:`.parent_watch`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop: asyncio.AbstractEventLoop | None = None
        self.runtime: Runtime | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._broker: dramatiq.Broker | None = None
        self._claims_failed = Repeated(log)  # a store that is down fails every token's claim
        self._parent_watch: ParentWatch | None = None

    def before_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        _FirstStopOnly.install()
        # Dramatiq's CLI set up the handlers and the level; ``log_level`` is the operator's
        logging.getLogger().setLevel(self.settings.log_level)
        self._parent_watch = ParentWatch.of_this_process(
            stop_gracefully
        )  # an orphan: as on SIGTERM
        if self._parent_watch is not None:
            write_output_to_own_stderr()  # not through the parent's relay (a pipe per line)
            self._parent_watch.start()
        self._broker = broker
        self._thread = threading.Thread(target=self._serve, name="tether-node", daemon=True)
        self._thread.start()
        if not self._ready.wait(60) or self.runtime is None:
            # Dramatiq logs an Exception here and serves on, taking messages no node claims for;
            # leaving the process makes Dramatiq's main process stop the rest and exit with it
            log.critical("the worker node did not start (see the log above); exiting")
            flush_logs()
            raise SystemExit(NODE_FAILED)

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if self._parent_watch is not None:
            self._parent_watch.stop()
        try:
            if self.loop is not None and self._stop is not None:
                self.loop.call_soon_threadsafe(self._stop.set)
            if self._thread is not None:
                self._thread.join(self.settings.timers.shutdown_grace + 15)
        finally:  # a worker process leaves through os._exit (no logging.shutdown), even when a
            flush_logs()  # second signal's exit interrupts the join

    def _serve(self) -> None:
        try:
            loops.run(self._main())
        except Exception:
            log.exception("worker node stopped")
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = load_app(self.settings.app)
        database_url = worker_database_url(self.settings)
        try:
            async with (
                distributed_services(
                    self.settings, database_url=database_url, separate_reads=False
                ) as services,
                run_node(settings=self.settings, services=services, app=app) as runtime,
                watching_broker(self.settings, services.store, services.queue.send),
            ):
                self.runtime = runtime
                loops.settle_heap()
                self._ready.set()
                await self._stop.wait()
        finally:
            self.runtime = None

    def start_invocations(self, invocation_ids: Sequence[str]) -> int:
        """One message's tokens: take a free slot for each, hand them to the node's loop and
        return without waiting for their claims; how many were handed over (0: the worker is
        stopping, and they are dropped).

        Dramatiq's threads so keep taking messages while the loop claims for them, many in one
        transaction. A full process stops taking messages (the back-pressure) and leaves them to
        processes with room: when no slot is free, this thread waits for one with the first
        token and sends the others back to the queue at once; tokens beyond the slots that are
        free go back too. With as many messages in hand as threads (``worker_command``), a full
        process so holds one token per thread. A message is acknowledged before its claims: if
        the process dies in between, the work is still queued and the periodic claim passes
        take it.
        """
        loop, runtime = self.loop, self.runtime
        if loop is None or runtime is None or not invocation_ids:
            return 0
        tokens = list(invocation_ids)
        if not runtime.slots.try_take():
            self._send_back(loop, runtime, tokens[1:])
            tokens = tokens[:1]
            runtime.slots.take()
        taken = 1
        while taken < len(tokens) and runtime.slots.try_take():
            taken += 1
        if not _on_loop(loop, self._start_all(runtime, tokens[:taken])):  # going away
            for _ in range(taken):
                runtime.slots.give()
            return 0  # the actor logs the drop
        self._send_back(loop, runtime, tokens[taken:])
        return taken

    def _send_back(
        self, loop: asyncio.AbstractEventLoop, runtime: Runtime, tokens: Sequence[str]
    ) -> None:
        """Tokens this process has no slot for, to the queue for one with room (sent from the
        loop; a failed send is the queue's to log, and the reaper's to make up for)."""
        if not tokens:
            return
        log.debug("%d token(s) from invocation %s on: sent back", len(tokens), tokens[0])
        _on_loop(loop, runtime.services.queue.send(tokens))  # if not: still queued, for others

    async def _start_all(self, runtime: Runtime, hints: Sequence[str]) -> None:
        """A message's tokens, handed to the loop at once: one hand-over from this thread (a
        future, a task, a wake-up of the loop) instead of one a token. Timed alone, 5-7 us of
        CPU a token in hand-overs of eight, against 21-28 us one at a time. Each claims in a
        task of its own; they start in one turn of the loop, so they join one claim batch."""
        await asyncio.gather(*(self._start(runtime, hint) for hint in hints))

    async def _start(self, runtime: Runtime, hint: str) -> None:
        try:
            if not await runtime.start_in_slot(hint):
                log.debug("token for invocation %s: nothing to claim now", hint)
        except Exception as exc:  # still queued: a freed slot or the periodic pass claims it
            self._claims_failed.warning(
                "token for invocation %s: claim failed (%s)", hint, type(exc).__name__
            )
