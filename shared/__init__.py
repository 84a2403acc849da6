"""Tether's shared core: the handler API, settings, store, pub/sub and the attempt runtime."""

from tether.app import AgentApp, InputCheck, InputRejected
from tether.context import InvocationContext, LimitExceeded, RequestAuth
from tether.credentials import UserAuthUnavailable
from tether.durable import StepFailed, WaitTimeout
from tether.thread import SessionThread, ThreadTurn

__all__ = [
    "AgentApp",
    "InputCheck",
    "InputRejected",
    "InvocationContext",
    "LimitExceeded",
    "RequestAuth",
    "SessionThread",
    "StepFailed",
    "ThreadTurn",
    "UserAuthUnavailable",
    "WaitTimeout",
]
