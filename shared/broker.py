"""The Dramatiq broker, built in this one place, and the messages Tether sends on it.

Messages carry ids only. ``run_invocation`` has retries off and no time limit: only the reaper
creates replacement attempts, and agent runs may take as long as they take.
"""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker

RUN_INVOCATION = "run_invocation"
REAP = "reap"


def build_broker(redis_url: str, *, with_worker_middleware: bool) -> RedisBroker:
    """A Redis broker; the gateway's needs no middleware, the worker's gets Dramatiq's defaults."""
    if with_worker_middleware:
        broker = RedisBroker(url=redis_url)  # type: ignore[no-untyped-call]
    else:
        broker = RedisBroker(url=redis_url, middleware=[])  # type: ignore[no-untyped-call]
    return broker


def run_invocation_message(queue: str, invocation_id: str) -> dramatiq.Message[None]:
    return dramatiq.Message(
        queue_name=queue,
        actor_name=RUN_INVOCATION,
        args=(invocation_id,),
        kwargs={},
        options={},
    )
