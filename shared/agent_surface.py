"""What the gateway's ``/api/agents/*`` routes need from an agent app, without importing the
agent runtime: how to turn a chat message or a Responses input into an invocation input, what
to show in ``/api/agents/info``, and how to translate the run's events into the Responses wire
format. ``tether.agents.build_agent_app`` sets ``app.agents`` to one of these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class EventTranslator(Protocol):
    """Stateful, one per stream: agent events in, Responses stream events out (spec §3.3). The
    gateway passes the run's ``run.waiting`` events too: an approval is shown once the run waits
    on it."""

    def translate(self, event: dict[str, Any]) -> list[dict[str, Any]]: ...

    def fail(self, message: str) -> list[dict[str, Any]]:
        """The run ended without an answer: ``error`` then ``response.failed`` (once)."""
        ...

    def finalize(self) -> list[dict[str, Any]]: ...


class AgentsSurface(Protocol):
    def chat_input(self, message: str, agent: str | None, skill: str | None = None) -> Any:
        """The invocation input of one chat turn (``skill``: one to force); raises
        ``InputRejected``."""
        ...

    def responses_input(self, items: str | Sequence[Mapping[str, Any]]) -> Any:
        """The invocation input of a non-streaming ``/api/agents/invocations`` request (default
        agent; system items refused; agents that need an approval refused): ``InputRejected``."""
        ...

    def keeps_thread(self, value: Any) -> bool:
        """Whether a turn of ``value`` (an input this surface made) keeps its thread: False for
        an ephemeral agent's, which deletes it after the turn; True for an agent it no longer
        has. Never raises."""
        ...

    def info(self) -> dict[str, Any]:
        """``{"agents": [...], "defaultAgent": ..., "skills": {agent: [{name, description}]}}``."""
        ...

    def translator(self, stream_id: str | None) -> EventTranslator:
        """A fresh translator; ``stream_id`` (the invocation id) goes into approval events."""
        ...
