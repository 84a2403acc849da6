"""Tether, a durable agent server: the public handler API.

``from tether import AgentApp, InvocationContext`` is what an app needs; everything else lives in
``tether.*`` (``tether.gateway``, ``tether.worker``, ``tether.store``, ``tether.agents``, ...).
"""

from tether.app import AgentApp
from tether.context import InvocationContext, LimitExceeded
from tether.durable import StepFailed, WaitTimeout

__all__ = ["AgentApp", "InvocationContext", "LimitExceeded", "StepFailed", "WaitTimeout"]
