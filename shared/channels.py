"""Every Redis key and pub/sub channel name Tether uses, in one place."""

from __future__ import annotations

CANCEL_CHANNEL = "tether:cancel"
"""Invocation ids whose cancellation was requested; every worker listens."""


def events_channel(invocation_id: str) -> str:
    """New events of one invocation, published after they are durable."""
    return f"tether:events:{invocation_id}"


def wake_channel(queue: str) -> str:
    """Wake-ups for the idle Dramatiq consumers of one queue (``q`` or its delay queue ``q.DQ``)."""
    return f"tether:wake:{queue}"
