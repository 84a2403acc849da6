"""A worker node: the runtime plus its heartbeat thread, reaper timer, periodic claim pass and
cancel listener.

The Dramatiq worker runs one per process on a loop thread; ``tether dev`` runs one inside the
gateway's own loop. Both get the same behaviour from this one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable

from tether import loops
from tether.app import AgentApp
from tether.channels import CANCEL_CHANNEL, QUEUED_CHANNEL, queued_tenants
from tether.pubsub import CLOSING, PubSub
from tether.repeated import Repeated
from tether.services import Services
from tether.settings import Settings
from tether.store import autovacuum
from tether.store.store import Store, StoreError
from tether.worker.heartbeat import Heartbeat
from tether.worker.liveness import Liveness
from tether.worker.parent_watch import first_of_its_command
from tether.worker.reaper import Reaper
from tether.worker.run_limits import RunLimits
from tether.worker.runtime import Runtime, StopReason

log = logging.getLogger(__name__)


def node_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@contextlib.asynccontextmanager
async def run_node(
    *, settings: Settings, services: Services, app: AgentApp
) -> AsyncIterator[Runtime]:
    """Run attempts, beat, reap and listen for cancels until the block ends, then drain."""
    store, pubsub = services.store, services.pubsub
    runtime = Runtime(
        services=services,
        app=app,
        name=node_name(),
        concurrency=settings.worker.concurrency,
        reserve=settings.worker.reserved_slots,
        max_event_bytes=settings.limits.max_event_bytes,
        finish_retry=settings.timers.stale_after,
        inline_sleep_max=settings.timers.inline_sleep_max,
        limits=RunLimits.from_settings(settings),
        thread_keep=settings.agents.max_thread_messages,
    )
    app.configure(settings)
    app.report_at_start()
    reaper = reaper_for(settings, runtime)
    heartbeat = Heartbeat(
        store=store,
        runtime=runtime,
        loop=asyncio.get_running_loop(),
        interval=settings.timers.heartbeat_interval,
        stale_after=settings.timers.stale_after,
    )
    heartbeat.start()
    reap_now = asyncio.Event()
    liveness = start_liveness(settings, services, runtime, reap_now)
    tasks = [
        asyncio.create_task(
            _reap_forever(reaper, settings.timers.reaper_interval, reap_now), name="reaper"
        ),
        asyncio.create_task(_listen_for_cancels(pubsub, runtime), name="cancel-listener"),
        asyncio.create_task(_listen_for_queued(pubsub, runtime), name="queued-listener"),
        asyncio.create_task(_fire_timers(services, settings.timers.timer_poll), name="timers"),
        asyncio.create_task(_claim_forever(runtime, settings.timers.claim_poll), name="claims"),
    ]
    if first_of_its_command():  # once per `tether worker`, not once per worker process
        tasks.append(asyncio.create_task(_check_autovacuum(store), name="autovacuum-check"))
    try:
        yield runtime
    finally:
        await runtime.drain(settings.timers.shutdown_grace)
        await app.shutdown()  # after the drain: no attempt uses what it closes
        await loops.cancel_and_wait(tasks)
        heartbeat.stop()
        await asyncio.to_thread(heartbeat.join, 10)
        if liveness is not None:  # after the drain: attempts it still runs keep their worker
            liveness.stop()
            await asyncio.to_thread(liveness.join, 10)


def start_liveness(
    settings: Settings, services: Services, runtime: Runtime, reap_now: asyncio.Event
) -> Liveness | None:
    """Crash detection through the database session, on PostgreSQL unless turned off
    (:mod:`tether.worker.liveness`). A dead worker it finds is reaped at once."""
    if services.store.dialect != "postgresql" or not settings.worker.session_liveness:
        return None
    loop = asyncio.get_running_loop()
    handing_back: set[asyncio.Task[None]] = set()

    def hand_back() -> None:
        task = loop.create_task(runtime.hand_back_all())
        handing_back.add(task)
        task.add_done_callback(handing_back.discard)

    liveness = Liveness(
        settings=settings,
        store=services.store,
        name=runtime.name,
        found_dead=lambda: _call_soon(loop, reap_now.set),
        declared_dead=lambda: _call_soon(loop, hand_back),
    )
    liveness.start()
    return liveness


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # a closed loop: the process is going away
        loop.call_soon_threadsafe(fn)


def reaper_for(settings: Settings, runtime: Runtime) -> Reaper:
    return Reaper(
        services=runtime.services,
        settings=settings,
        has_recover=runtime.app.recover_handler is not None,
    )


async def _check_autovacuum(store: Store) -> None:
    """Once, at start: warn when PostgreSQL's autovacuum leaves Tether's tables alone
    (:mod:`tether.store.autovacuum`)."""
    try:
        found = await store.autovacuum_coverage()
    except StoreError as exc:
        log.info("could not read PostgreSQL's autovacuum settings (%s)", exc)
        return
    except Exception:
        log.warning("checking PostgreSQL's autovacuum settings failed", exc_info=True)
        return
    if found is not None and (text := autovacuum.warning_text(found)):
        log.warning("%s", text)


async def _reap_forever(reaper: Reaper, interval: float, now: asyncio.Event) -> None:
    """A pass at start (a process that starts after a crash finds the dead attempts at once),
    then every ``interval`` with jitter, or as soon as ``now`` is set (a dead worker found)."""
    failed = Repeated(log)  # a store that is down fails every pass
    while True:
        now.clear()
        try:
            await reaper.reap_once()
        except StoreError as exc:
            failed.warning("reaper pass failed (%s)", exc)
        except Exception:  # never let the timer die: the next pass may well succeed
            log.exception("reaper pass failed unexpectedly")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(now.wait(), loops.jittered(interval))


async def _fire_timers(services: Services, interval: float) -> None:
    """Resume parked invocations whose durable sleep or wait timeout is due. Every node polls
    (with jitter); the conditional ``waiting → queued`` lets exactly one of them win each."""
    failed = Repeated(log)  # a store that is down fails every pass, four times a second
    while True:
        await asyncio.sleep(loops.jittered(interval))
        try:
            resumed = await services.store.journal.fire_due()
        except Exception as exc:
            failed.warning("timer pass failed (%s)", type(exc).__name__)
            continue
        if resumed:
            log.info("timers resumed %d parked invocation(s)", len(resumed))
            await services.queue.send(resumed)


async def _claim_forever(runtime: Runtime, interval: float) -> None:
    """Claim for free slots when queued work may run: work whose tokens were dropped while its
    tenant was at its cap or its session busy, and a cap raised at run time, start within a
    pass without a message (a pass with nothing queued costs one indexed read, no lock)."""
    while True:
        await asyncio.sleep(loops.jittered(interval))
        started = await runtime.claim_free()
        if started:
            log.debug("periodic claim started %d attempt(s)", started)


async def _listen_for_queued(pubsub: PubSub, runtime: Runtime) -> None:
    """Gateways announce tenants with new work (ahead of their tokens, which may wait behind
    another tenant's flood in the broker): the next claim reads them, and a reserved slot
    starts a tenant's work at once if it has nothing running."""
    while True:
        try:
            async with pubsub.subscribe(QUEUED_CHANNEL) as sub:
                while (message := await sub.get()) is not CLOSING:
                    runtime.announced(queued_tenants(message) if isinstance(message, str) else None)
                return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the claims' own scans find the work meanwhile
            runtime.announced(None)
            log.warning("queued-work listener failed (%s); retrying", type(exc).__name__)
            await asyncio.sleep(1.0)


async def _listen_for_cancels(pubsub: PubSub, runtime: Runtime) -> None:
    while True:
        try:
            async with pubsub.subscribe(CANCEL_CHANNEL) as sub:
                while True:
                    message = await sub.get()
                    if isinstance(message, str):
                        runtime.stop(message, StopReason.CANCEL)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # heartbeats still deliver cancels meanwhile
            log.warning("cancel listener failed (%s); retrying", type(exc).__name__)
            await asyncio.sleep(1.0)
