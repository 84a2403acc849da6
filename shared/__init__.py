"""Tether, a durable agent server: the public handler API.

``from tether import AgentApp, InvocationContext`` is what an app needs; everything else lives in
``tether.*`` (``tether.gateway``, ``tether.worker``, ``tether.store``, ``tether.agents``, ...).
"""

from tether.app import AgentApp, InputCheck, InputRejected
from tether.context import InvocationContext, LimitExceeded, RequestAuth
from tether.credentials import UserAuthUnavailable
from tether.durable import MAX_WAIT_SECONDS, StepFailed, WaitTimeout
from tether.thread import SessionThread, ThreadTurn
from tether.usage import BudgetExceeded, ModelPrice, ModelUsage

__all__ = [
    "MAX_WAIT_SECONDS",
    "AgentApp",
    "BudgetExceeded",
    "InputCheck",
    "InputRejected",
    "InvocationContext",
    "LimitExceeded",
    "ModelPrice",
    "ModelUsage",
    "RequestAuth",
    "SessionThread",
    "StepFailed",
    "ThreadTurn",
    "UserAuthUnavailable",
    "WaitTimeout",
]
