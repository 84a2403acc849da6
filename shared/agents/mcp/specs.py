"""MCP tools as agent tools: names, annotations, and the calls behind them.

A server's tool ``add_note`` becomes ``mcp.<server>.add_note``. Its MCP annotations decide the
approval gate, read as the MCP specification defines them: ``readOnlyHint: true`` is a ``read``
tool (never gated); otherwise ``destructiveHint`` (true unless the server says false) makes it
``destructive``, and a tool that is neither read-only nor destructive is a ``write`` tool; both
wait for approval. A tool with no annotations is therefore gated, as MCP says it may destroy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.agents.tools import TOOL_NAME, wire_name
from tether.agents.types import ToolAnnotations

PREFIX = "mcp"


@dataclass(frozen=True, slots=True)
class McpToolSpec:
    """What a run records of one listed tool, so that a replay offers the same tools."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    hints: dict[str, bool]

    @property
    def key(self) -> str:
        return f"{PREFIX}.{self.server}.{self.name}"

    def usable(self) -> bool:
        """Whether ``mcp.<server>.<tool>`` is a valid agent tool name (no odd characters), of at
        most 64 characters also on the wire, where each ``.`` is ``__`` (model APIs cap names
        there: a longer one would fail every model call of the agent)."""
        return bool(TOOL_NAME.match(self.key)) and bool(TOOL_NAME.match(wire_name(self.key)))

    def annotations(self) -> ToolAnnotations:
        """The agent-side annotations for the MCP hints (see the module docstring)."""
        idempotent = self.hints.get("idempotentHint")
        if self.hints.get("readOnlyHint") is True:
            return ToolAnnotations(effect="read", idempotent=idempotent)
        destructive = self.hints.get("destructiveHint", True)
        return ToolAnnotations(
            effect="destructive" if destructive else "write",
            idempotent=idempotent,
            destructive=destructive,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "hints": self.hints,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> McpToolSpec:
        return cls(
            str(data["server"]),
            str(data["name"]),
            str(data.get("description") or ""),
            dict(data.get("inputSchema") or {"type": "object", "properties": {}}),
            {str(k): bool(v) for k, v in dict(data.get("hints") or {}).items()},
        )


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """A ``tools/call`` answer: its text, and whether the server flagged it as an error."""

    text: str
    is_error: bool = False
