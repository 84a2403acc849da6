"""Running one tool call: budget, lookup, sub-agent depth, timeout, result normalization."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.agents.definitions import AgentDefinition
from tether.agents.errors import LimitExceeded, ModelError, ToolError
from tether.agents.registry import SUB_AGENT_PREFIX, ToolEntry
from tether.agents.types import Limits, ToolCall
from tether.jsonvalue import dumps

log = logging.getLogger(__name__)

RunChild = Callable[[AgentDefinition, str, int], Awaitable[str]]


@dataclass
class Budget:
    """The run-wide tool-call budget, shared by the top-level agent and all its sub-agents."""

    limit: int
    used: int = 0

    def take(self) -> None:
        if self.used >= self.limit:
            raise LimitExceeded(
                f"Tool-call budget exhausted (limit {self.limit}). Raise "
                "Limits.max_tool_calls or review the agent's tool use."
            )
        self.used += 1


def normalize_result(result: Any, max_chars: int) -> str:
    """None → ``""``; a string as-is; anything else as JSON; cut past ``max_chars``."""
    text = "" if result is None else result if isinstance(result, str) else dumps(result)
    if len(text) > max_chars:
        return (
            text[:max_chars]
            + f"\n\n[Result truncated: {len(text)} chars exceeds {max_chars} limit]"
        )
    return text


def sub_agent_input(args: Any) -> str:
    if isinstance(args, dict) and isinstance(args.get("input"), str):
        return str(args["input"])
    return dumps(args)


@dataclass
class ToolDispatcher:
    index: Mapping[str, ToolEntry]
    limits: Limits
    budget: Budget
    depth: int
    run_child: RunChild

    async def execute(self, call: ToolCall) -> str:
        """The tool's result text; raises ToolError (model-visible) or LimitExceeded."""
        self.budget.take()
        entry = self.index.get(call.name)
        if entry is None:
            raise ToolError(f"Unknown tool: {call.name}")
        if entry.kind == "hosted":
            raise ToolError(
                f"Tool '{call.name}' is a hosted-supervisor tool and cannot be "
                "invoked from this process"
            )
        if entry.agent is not None:
            result: Any = await self._sub_agent(call.name, entry.agent, call.args)
        else:
            result = await self._function(call, entry)
        return normalize_result(result, self.limits.max_result_chars)

    async def _sub_agent(self, name: str, agent: AgentDefinition, args: Any) -> str:
        depth = self.depth + 1
        if depth > self.limits.max_sub_agent_depth:
            raise ToolError(f"Sub-agent depth exceeded (limit {self.limits.max_sub_agent_depth}).")
        try:
            return await self.run_child(agent, sub_agent_input(args), depth)
        except ModelError as exc:
            key = name.removeprefix(SUB_AGENT_PREFIX)
            raise ToolError(f"Sub-agent '{key}' failed: {exc}") from None

    async def _function(self, call: ToolCall, entry: ToolEntry) -> Any:
        assert entry.tool is not None
        timeout = entry.tool.timeout_s or self.limits.tool_call_timeout_s
        try:
            return await asyncio.wait_for(entry.tool.call(call.args), timeout)
        except TimeoutError:
            raise ToolError(f"Tool '{call.name}' timed out after {timeout:g}s") from None
