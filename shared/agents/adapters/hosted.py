"""Hosted Supervisor API tools: Genie spaces, UC functions, Knowledge Assistants, apps, connections.

They run inside the Supervisor API, never in this process. An agent lists them like any tool;
the runtime sends their wire specs through ``extensions["databricks.supervisor"]`` (spec §1.2).
Descriptions are prompt text: take them from app configuration only, never from user input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.agents.errors import DefinitionError

HOSTED_KIND = "hosted-supervisor"


@dataclass(frozen=True, slots=True)
class HostedTool:
    """A tagged hosted-tool spec; ``spec`` is the exact wire object."""

    spec: dict[str, Any]

    @property
    def key(self) -> str:
        kind = self.spec["type"]
        inner = self.spec[kind]
        ident = inner.get("id") or inner.get("name") or inner.get("knowledge_assistant_id")
        return f"{kind}-{ident}".replace(".", "-")

    @property
    def description(self) -> str:
        return str(self.spec[self.spec["type"]]["description"])

    def to_json(self) -> dict[str, Any]:
        return {"__kind": HOSTED_KIND, "spec": self.spec}


def is_supervisor_tool(value: Any) -> bool:
    """True only for a tagged hosted-supervisor tool (not a bare wire object, not an MCP tool)."""
    if isinstance(value, HostedTool):
        return True
    return isinstance(value, dict) and value.get("__kind") == HOSTED_KIND


def _make(kind: str, field_name: str, value: str, description: str) -> HostedTool:
    if not isinstance(value, str) or not value.strip():
        raise DefinitionError(f"{kind}: '{field_name}' must be a non-empty string")
    if not isinstance(description, str) or not description.strip():
        raise DefinitionError(f"{kind}: 'description' is required and must be non-empty")
    return HostedTool({"type": kind, kind: {field_name: value, "description": description}})


def genie_space(space_id: str, description: str) -> HostedTool:
    return _make("genie_space", "id", space_id, description)


def uc_function(name: str, description: str) -> HostedTool:
    return _make("uc_function", "name", name, description)


def knowledge_assistant(assistant_id: str, description: str) -> HostedTool:
    return _make("knowledge_assistant", "knowledge_assistant_id", assistant_id, description)


def app(name: str, description: str) -> HostedTool:
    return _make("app", "name", name, description)


def uc_connection(name: str, description: str) -> HostedTool:
    return _make("uc_connection", "name", name, description)
