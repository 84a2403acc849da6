"""What a tool may ask for: the call's place in the run and the caller's credentials.

A tool function that declares a parameter annotated :class:`ToolContext` gets one (it is not part
of the tool's JSON schema, so the model never sees it)::

    @tool(effect="write")
    def book(city: str, context: ToolContext) -> str:
        key = context.step_key          # stable across attempts: make the booking idempotent
        client = context.workspace_client()   # the caller's, for an on-behalf-of-user agent
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether import RequestAuth

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient


@dataclass(frozen=True, slots=True)
class ToolContext:
    call_id: str
    """The call's id in the run's events (unique across the agent and its sub-agents)."""
    invocation_id: str
    attempt: int
    step_key: str
    """Stable per invocation and call: an idempotency key for the tool's side effects."""
    agent: str
    request_auth: RequestAuth | None
    """The caller's credentials (``ctx.request_auth``); None for an agent that does not run on
    behalf of the user."""
    on_behalf_of_user: bool = False

    def workspace_client(self) -> WorkspaceClient:
        """The caller's client for an ``auth: on-behalf-of-user`` agent (raises
        ``UserAuthUnavailable`` when the run goes on without the user), else the app's."""
        if self.request_auth is not None:
            return self.request_auth.client_for("user" if self.on_behalf_of_user else "app")
        from databricks.sdk import WorkspaceClient

        return WorkspaceClient()
