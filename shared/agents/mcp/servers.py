"""Declaring an agent's MCP servers: ``mcp_server(...)`` in code, ``mcp:`` in front matter.

```yaml
mcp:                                  # or mcp_servers:
  notes: http://127.0.0.1:8765/mcp    # name: url
  genie:
    url: /api/2.0/mcp/genie/01ab…     # a path is on the workspace host
    tools: [query_space]              # only these of the server's tools (default: all)
    timeout: 60                       # seconds per call (default 30)
```

A list of ``{name, url, tools?, timeout?}`` mappings works too. Each tool a server lists becomes
the agent tool ``mcp.<server>.<tool>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.agents.errors import DefinitionError
from tether.jsonvalue import finite_number

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}\Z")
DEFAULT_TIMEOUT_S = 30.0
FRONT_MATTER_KEYS = ("mcp", "mcp_servers")
SERVER_KEYS = frozenset({"name", "url", "tools", "timeout"})


@dataclass(frozen=True, slots=True)
class McpServer:
    """One streamable-HTTP MCP server an agent uses. ``tools`` (None: all) limits which of its
    tools the agent gets; ``timeout_s`` bounds each call."""

    name: str
    url: str
    tools: tuple[str, ...] | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


def mcp_server(
    name: str,
    url: str,
    *,
    tools: Sequence[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> McpServer:
    """A validated :class:`McpServer` (the URL is checked against the host policy at load)."""
    if not isinstance(name, str) or not SERVER_NAME.match(name):
        raise DefinitionError(f"MCP server name {name!r} must match {SERVER_NAME.pattern}")
    if not isinstance(url, str) or not url.strip():
        raise DefinitionError(f"MCP server '{name}': 'url' must be a non-empty string")
    if tools is not None and (
        isinstance(tools, str) or not all(isinstance(t, str) and t for t in tools)
    ):
        raise DefinitionError(f"MCP server '{name}': 'tools' must be a list of tool names")
    if not finite_number(timeout_s) or timeout_s <= 0:
        raise DefinitionError(f"MCP server '{name}': 'timeout' must be a positive number")
    return McpServer(name, url.strip(), tuple(tools) if tools is not None else None, timeout_s)


def _entry(name: Any, value: Any) -> McpServer:
    if isinstance(value, str):
        return mcp_server(name, value)
    if not isinstance(value, Mapping):
        raise DefinitionError(f"MCP server {name!r} must be a URL or a mapping")
    for key in value:
        if key not in SERVER_KEYS:
            raise DefinitionError(f"MCP server {name!r}: unknown key '{key}'")
    return mcp_server(
        name,
        value.get("url", ""),
        tools=value.get("tools"),
        timeout_s=value.get("timeout", DEFAULT_TIMEOUT_S),
    )


def servers_from_front_matter(fm: Mapping[str, Any], path: Path) -> tuple[McpServer, ...]:
    """The ``mcp:`` (or ``mcp_servers:``) entry of an agent's front matter."""
    present = [k for k in FRONT_MATTER_KEYS if fm.get(k) is not None]
    if len(present) > 1:
        raise DefinitionError(f"{path}: use one of 'mcp' and 'mcp_servers', not both")
    if not present:
        return ()
    raw = fm[present[0]]
    try:
        if isinstance(raw, Mapping):
            servers = [_entry(n, v) for n, v in raw.items()]
        elif isinstance(raw, list):
            servers = [
                _entry(e.get("name"), {k: v for k, v in e.items() if k != "name"})
                if isinstance(e, Mapping)
                else _entry(None, e)
                for e in raw
            ]
        else:
            raise DefinitionError(f"'{present[0]}' must be a mapping or a list of servers")
    except DefinitionError as exc:
        raise DefinitionError(f"{path}: {exc}") from None
    return unique_servers(servers, str(path))


def unique_servers(servers: Sequence[McpServer], where: str) -> tuple[McpServer, ...]:
    names = [s.name for s in servers]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise DefinitionError(f"{where}: MCP server names must be unique ({duplicates})")
    return tuple(servers)
