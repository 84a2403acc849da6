"""Where an agent run records its work: durable steps named by their place in the run.

In the server the record is the invocation's (``InvocationContext.step`` and
``wait_for_input``): a model turn, a tool call's outcome and an approval are each recorded once,
and a resumed or replacement attempt replays them instead of asking the model or running the tool
again. The standalone runner records nothing (:class:`Unrecorded`).

Names come from the run's shape, never from a clock or a random id, so every attempt asks for
the same names in the same order: ``planner#t0`` is the top-level agent's first model turn,
``planner#t0.c1`` the outcome of its second tool call, and ``planner#t0.c1/weather#t0`` the first
turn of the sub-agent that call ran. Agent names cannot contain ``#`` or ``/``, so two places
never share a name.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

MAX_NAME = 256
_KEEP = 200


class StepLog(Protocol):
    """The durable half of ``InvocationContext`` an agent run uses."""

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    async def wait_for_input(
        self,
        name: str,
        *,
        prompt: Any = None,
        timeout: float | None = None,  # noqa: ASYNC109 (a durable timeout)
        details: Mapping[str, Any] | None = None,
    ) -> Any: ...


class Unrecorded:
    """A :class:`StepLog` that runs every step and keeps nothing (the standalone runner)."""

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def wait_for_input(
        self,
        name: str,
        *,
        prompt: Any = None,
        timeout: float | None = None,  # noqa: ASYNC109 (a durable timeout)
        details: Mapping[str, Any] | None = None,
    ) -> Any:
        raise RuntimeError("this run cannot wait for input: it has no invocation to park")


def _bounded(name: str) -> str:
    """``name``, or a long one's head plus a digest of the whole (step names are ≤ 256)."""
    if len(name) <= MAX_NAME:
        return name
    return f"{name[:_KEEP]}~{hashlib.sha256(name.encode()).hexdigest()[:40]}"


@dataclass(frozen=True, slots=True)
class AgentPath:
    """Where one agent loop sits in a run: the agents from the top-level one down to it, and
    the step-name prefix that places it."""

    agents: tuple[str, ...]
    prefix: str

    @classmethod
    def root(cls, agent: str) -> AgentPath:
        return cls((agent,), agent)

    @property
    def depth(self) -> int:
        return len(self.agents) - 1

    def turn(self, turn: int) -> str:
        return _bounded(f"{self.prefix}#t{turn}")

    def call(self, turn: int, position: int) -> str:
        return _bounded(f"{self.prefix}#t{turn}.c{position}")

    def call_id(self, model_call_id: str) -> str:
        """The id a call goes by in the run's events: the model's own at the top level; under
        a sub-agent, prefixed by its place, so a parent's and a child's ids never collide."""
        return model_call_id if self.depth == 0 else f"{self.prefix}/{model_call_id}"

    def child(self, turn: int, position: int, agent: str) -> AgentPath:
        return AgentPath((*self.agents, agent), f"{self.prefix}#t{turn}.c{position}/{agent}")
