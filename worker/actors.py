"""The actors. Import this module to get the broker with its actors declared.

``run_invocations`` carries tokens: each lets a worker claim the next fair invocation
(:mod:`tether.store.claims`); the ids are only hints. A duplicate or redelivered message claims
nothing more than the queue holds, because claiming is conditional. Neither actor is ever retried
or has a time limit: the broker has no ``Retries`` or ``TimeLimit`` middleware (see
:func:`tether.worker.dramatiq_redis.build_broker`). ``run_invocation`` is the one-token message
that gateways and workers sent before, still taken so that none queued across an upgrade is lost.
"""

from __future__ import annotations

import logging

import dramatiq

from tether.worker.broker import broker, host, settings
from tether.worker.dramatiq_redis import RUN_INVOCATION, RUN_INVOCATIONS

log = logging.getLogger(__name__)
__all__ = ["broker", "run_invocation", "run_invocations"]


@dramatiq.actor(actor_name=RUN_INVOCATIONS, queue_name=settings.worker.queue)
def run_invocations(invocation_ids: list[str]) -> None:
    if not host.start_invocations(invocation_ids) and invocation_ids:
        log.debug(
            "%d token(s) from invocation %s on: dropped (the worker is stopping)",
            len(invocation_ids),
            invocation_ids[0],
        )


@dramatiq.actor(actor_name=RUN_INVOCATION, queue_name=settings.worker.queue)
def run_invocation(invocation_id: str) -> None:
    run_invocations([invocation_id])
