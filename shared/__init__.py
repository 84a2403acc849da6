"""Tether's shared core: the handler API, settings, store, pub/sub and the attempt runtime."""

from shared.app import AgentApp
from shared.context import InvocationContext

__all__ = ["AgentApp", "InvocationContext"]
