"""What can go wrong with an MCP server; every message is safe for the model and the log."""

from __future__ import annotations

from tether.agents.errors import AgentError


class McpPolicyError(AgentError):
    """An MCP URL or address the host policy refuses; the message names the host, no secret."""


class McpUnavailable(AgentError):
    """The server could not be reached, or its session ended; the message names the server."""


class McpRefused(AgentError):
    """The server answered a request with a JSON-RPC error; the message is the server's own
    (bounded), which the model may read."""


class McpSessionLost(McpUnavailable):
    """The server no longer knows the session (HTTP 404 to a request naming it: it restarted or
    expired it); the request was not run, and MCP says to start a new session."""
