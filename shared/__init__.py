"""Tether's shared core: the handler API, settings, store, pub/sub and the attempt runtime."""

from tether.app import AgentApp
from tether.context import InvocationContext, LimitExceeded
from tether.durable import StepFailed, WaitTimeout

__all__ = ["AgentApp", "InvocationContext", "LimitExceeded", "StepFailed", "WaitTimeout"]
