"""Every use Tether makes of Dramatiq's internals, in this one module.

Tether uses Dramatiq through its public surface (brokers, middleware hooks, ``Consumer``,
``Message``) except for the pieces below, each kept because it is worth its speed. Tether pins
``dramatiq[redis]>=2.2.1,<2.3``, the range it was tested with, and
``tests/unit/test_dramatiq_private.py`` fails loudly when the installed Dramatiq changes any of
them:

1. **The Redis broker's Lua script**, ``dramatiq/brokers/redis/dispatch.lua``.
   :class:`tether.worker.enqueuer.AsyncEnqueuer` runs it itself (``EVALSHA`` from asyncio, many
   messages in one pipeline, no thread), because ``RedisBroker.enqueue`` is synchronous. It
   relies on the file's place in the package, its content (:data:`DISPATCH_SHA256`, checked at
   start by :func:`check_dispatch_script`) and the order of the ``enqueue`` command's arguments
   (:data:`ENQUEUE_ARGV`, built by :func:`enqueue_arguments`).
2. **How ``RedisBroker.enqueue`` lays a message out**: the key namespace ``dramatiq``, a fresh
   ``redis_message_id`` option per enqueue, a delayed message on the delay queue (``dq_name``)
   with an ``eta`` option in epoch milliseconds, and queue maintenance on
   ``DEFAULT_MAINTENANCE_CHANCE`` of every ``MAINTENANCE_SCALE`` commands, with the default
   heartbeat timeout and dead-message TTL (:func:`redis_message`).
3. **The message encoding**: ``Message.encode`` with Dramatiq's default JSON encoder, which the
   workers' ``Message.decode`` reads back.
4. **The unpack bound** (``max_unpack_size``) Dramatiq derives per broker from ``maxstack.lua``;
   Tether passes :data:`MAX_UNPACK`, under half Lua's usual C stack (only maintenance unpacks).
5. **The Redis consumer's back-off.** The consumer ``RedisBroker.consume`` returns (the private
   ``_RedisConsumer``) sleeps a back-off bounded by its idle timeout after an empty fetch.
   Created with an idle timeout of 0 (:func:`unsleeping_consumer`) it returns at once, and
   Tether's consumer waits for a wake-up instead. Tether touches none of its attributes, only
   the public ``Consumer`` interface.
6. **Where messages wait**: ``dramatiq:<queue>.msgs`` and ``dramatiq:<queue>.DQ.msgs``, hashes of
   message id → encoded message, from enqueue until acknowledgement (:func:`message_hashes`).
   :mod:`tether.worker.broker_watch` reads them to re-send only what Redis lost.
"""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dramatiq
from dramatiq.broker import Consumer
from dramatiq.brokers.redis import (
    DEFAULT_DEAD_MESSAGE_TTL,
    DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_MAINTENANCE_CHANCE,
    MAINTENANCE_SCALE,
    RedisBroker,
)
from dramatiq.common import dq_name

NAMESPACE = "dramatiq"
DISPATCH_PATH = Path(dramatiq.__file__).parent / "brokers" / "redis" / "dispatch.lua"
DISPATCH_SHA256 = "ba4d872e4fb204ebc3f73ca4719265a9946d70e847856c125314f01a8c90540c"
"""The script Tether was tested with (Dramatiq 2.2.1)."""
ENQUEUE_ARGV = (
    "command",
    "timestamp",
    "queue_name",
    "worker_id",
    "heartbeat_timeout",
    "dead_message_ttl",
    "do_maintenance",
    "max_unpack_size",
    "message_id",
    "message_data",
)
"""The script's arguments for ``enqueue``, in order, named as the script names them."""
MAX_UNPACK = 3000  # under half Lua's C stack (8,000), as Dramatiq computes it


class IncompatibleDramatiq(RuntimeError):
    """The installed Dramatiq is not one whose internals Tether was tested with."""


def dispatch_script() -> bytes:
    return DISPATCH_PATH.read_bytes()


def check_dispatch_script(script: bytes) -> None:
    """Refuse to enqueue with a script Tether was not tested with: the workers might never see
    the messages, and every send would look successful."""
    found = hashlib.sha256(script).hexdigest()
    if found != DISPATCH_SHA256:
        raise IncompatibleDramatiq(
            f"Dramatiq {dramatiq.__version__}'s dispatch.lua is not the one Tether was tested "
            f"with (sha256 {found}, expected {DISPATCH_SHA256}); install the Dramatiq version "
            "pyproject.toml pins, or re-check tether/worker/dramatiq_private.py"
        )


@dataclass(frozen=True, slots=True)
class RedisMessage:
    """One message as ``RedisBroker.enqueue`` stores it."""

    queue: str
    """The queue it goes on: the delay queue (``q.DQ``) when it is delayed."""
    redis_id: str
    body: bytes


def redis_message(queue: str, actor_name: str, args: tuple[Any, ...], delay: float) -> RedisMessage:
    """The message ``RedisBroker.enqueue`` would store for ``actor_name(*args)`` sent to
    ``queue`` after ``delay`` seconds."""
    redis_id = str(uuid.uuid4())
    options: dict[str, Any] = {"redis_message_id": redis_id}
    if delay > 0:
        queue = dq_name(queue)
        options["eta"] = int(time.time() * 1000) + int(delay * 1000)
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=queue, actor_name=actor_name, args=args, kwargs={}, options=options
    )
    return RedisMessage(queue, redis_id, message.encode())


def enqueue_arguments(message: RedisMessage, *, broker_id: str, now_ms: int) -> list[Any]:
    """The script's ARGV for enqueueing ``message`` (keys: ``[NAMESPACE]``), in
    :data:`ENQUEUE_ARGV` order, with maintenance as often as Dramatiq's own enqueue does it."""
    maintenance = int(random.randint(1, MAINTENANCE_SCALE) <= DEFAULT_MAINTENANCE_CHANCE)
    return [
        "enqueue",
        now_ms,
        message.queue,
        broker_id,
        DEFAULT_HEARTBEAT_TIMEOUT,
        DEFAULT_DEAD_MESSAGE_TTL,
        maintenance,
        MAX_UNPACK,
        message.redis_id,
        message.body,
    ]


def unsleeping_consumer(broker: RedisBroker, queue_name: str, prefetch: int) -> Consumer:
    """Dramatiq's own Redis consumer of ``queue_name``, whose back-off after an empty fetch is
    0 ms: ``__next__`` fetches, and returns None at once when nothing came."""
    return RedisBroker.consume(broker, queue_name, prefetch, timeout=0)


def message_hashes(queue: str) -> tuple[str, str]:
    """The hashes holding every message of ``queue`` not yet acknowledged: due, and delayed."""
    return f"{NAMESPACE}:{queue}.msgs", f"{NAMESPACE}:{dq_name(queue)}.msgs"
