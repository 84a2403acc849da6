"""Every Redis key and pub/sub channel name Tether uses, in one place."""

from __future__ import annotations

CANCEL_CHANNEL = "tether:cancel"
"""Invocation ids whose cancellation was requested; every worker listens."""


QUEUED_CHANNEL = "tether:queued"
"""Tenants with newly accepted work, an accept batch's in one message (:func:`queued_message`);
every worker process adds them to the tenants its claims read (:mod:`tether.store.candidates`)."""


def queued_message(tenants: list[str]) -> str:
    """One message for these tenants: their names a line each. A name holds no line break (a
    tenant's name is what an owner's may be, :func:`tether.store.tenants.check_tenant_name`,
    which holds no control character), and a message of one name is the name, as gateways before
    2026-12-05 sent it, one message per tenant (each message a ``PUBLISH``, and a read in
    every worker process: about one per invocation in a burst from many owners)."""
    return "\n".join(tenants)


def queued_tenants(message: str) -> list[str]:
    """The tenants of a :data:`QUEUED_CHANNEL` message."""
    return message.split("\n")


def events_channel(invocation_id: str) -> str:
    """New events of one invocation, published after they are durable."""
    return f"tether:events:{invocation_id}"


def wake_channel(queue: str) -> str:
    """Wake-ups for the idle Dramatiq consumers of one queue (``q`` or its delay queue ``q.DQ``)."""
    return f"tether:wake:{queue}"


def broker_marker(queue: str) -> str:
    """A token that lives as long as the broker's data: gone means Redis lost the queue's messages
    (a flush, or a restart without persistence)."""
    return f"tether:broker:{queue}"


def broker_resync(queue: str, run_id: str) -> str:
    """Taken (``SET NX``) by the one worker that re-sends what a new Redis server (``run_id``)
    may have lost while keeping the marker (a restart from persistence, a fail-over)."""
    return f"tether:broker:{queue}:resync:{run_id}"
