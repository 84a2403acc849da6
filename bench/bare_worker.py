"""Dramatiq alone: the baseline worker. A no-op actor on the bench's private queue, with the
middleware Tether's worker keeps (so the difference is Tether's own work, not Dramatiq's).

Run as ``TETHER_BENCH_QUEUE=q python -m dramatiq bench.bare_worker --queues q ...``.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import AgeLimit, Callbacks, Pipelines, ShutdownNotifications

from bench.baselines import BARE_ACTOR

broker = RedisBroker(  # type: ignore[no-untyped-call]
    url=os.environ.get("TETHER_REDIS_URL", "redis://127.0.0.1:6379/0"),
    middleware=[AgeLimit(), ShutdownNotifications(), Callbacks(), Pipelines()],
)
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name=BARE_ACTOR, queue_name=os.environ["TETHER_BENCH_QUEUE"])
def noop(invocation_id: str) -> None:
    return None
