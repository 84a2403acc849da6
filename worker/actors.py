"""The actors. Import this module to get the broker with its actors declared.

``run_invocation`` is a token: it lets a worker claim the next fair invocation
(:mod:`tether.store.claims`); the id it carries is only a hint. A duplicate or redelivered message
claims nothing more than the queue holds, because claiming is conditional. It is never retried
and has no time limit: the broker has no ``Retries`` or ``TimeLimit`` middleware (see
:func:`tether.worker.dramatiq_redis.build_broker`).
"""

from __future__ import annotations

import logging

import dramatiq

from tether.worker.broker import broker, host, settings
from tether.worker.dramatiq_redis import RUN_INVOCATION

log = logging.getLogger(__name__)
__all__ = ["broker", "run_invocation"]


@dramatiq.actor(actor_name=RUN_INVOCATION, queue_name=settings.worker.queue)
def run_invocation(invocation_id: str) -> None:
    if not host.start_invocation(invocation_id):
        log.debug("token for invocation %s: dropped (the worker is stopping)", invocation_id)
