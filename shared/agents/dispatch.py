"""Admitting and running one tool call: budget, lookup, sub-agent depth, timeout, normalization.

The order is the reference's (spec §4.5): the budget is taken first (so an unknown or a denied
call still uses it up), then the name is looked up; the approval gate comes after admission
(``shared.agents.calls``), and only then does anything run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.agents.errors import LimitExceeded, ToolError
from tether.agents.registry import ToolEntry
from tether.agents.tool_context import ToolContext
from tether.agents.types import Limits, ToolCall
from tether.jsonvalue import dumps, storable

log = logging.getLogger(__name__)


@dataclass
class Budget:
    """The run-wide tool-call budget, shared by the top-level agent and all its sub-agents.

    It is not saved anywhere: a resumed attempt replays every call in order, which takes the
    budget again exactly as the first attempt did."""

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
    """None → ``""``; a string as-is; anything else as JSON; cut past ``max_chars``; made
    storable (:func:`tether.jsonvalue.storable`): a tool's side effects are done by the time
    its result is stored, and an odd character in it must not fail the run."""
    if result is None:
        text = ""
    elif isinstance(result, str):
        text = storable(result)
    else:
        try:
            text = dumps(result)
        except ValueError:  # NUL or a lone surrogate inside: JSON of the cleaned text instead
            text = storable(json.dumps(result, default=str, ensure_ascii=False))
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

    def admit(self, call: ToolCall) -> ToolEntry:
        """Take the budget and find the tool; raises LimitExceeded (the run stops) or ToolError
        (the model reads it)."""
        self.budget.take()
        entry = self.index.get(call.name)
        if entry is None:
            raise ToolError(f"Unknown tool: {call.name}")
        if entry.kind == "hosted":
            raise ToolError(
                f"Tool '{call.name}' is a hosted-supervisor tool and cannot be "
                "invoked from this process"
            )
        if entry.agent is not None and self.depth + 1 > self.limits.max_sub_agent_depth:
            raise ToolError(f"Sub-agent depth exceeded (limit {self.limits.max_sub_agent_depth}).")
        return entry

    async def run_function(
        self, call: ToolCall, entry: ToolEntry, context: ToolContext | None = None
    ) -> str:
        """A function tool's normalized result; raises ToolError or the tool's own exception.

        An async tool past its timeout is cancelled. A sync tool runs on a thread, which
        cannot be stopped: the call is reported (to the model, the client and the log) as timed
        out *and still running*, and its eventual result is dropped."""
        assert entry.tool is not None
        timeout = entry.tool.timeout_s or self.limits.tool_call_timeout_s
        try:
            result = await asyncio.wait_for(contained(entry.tool.call(call.args, context)), timeout)
        except TimeoutError:
            if entry.tool.is_sync:
                log.warning(
                    "tool '%s' (call %s) timed out after %gs; its thread is still running",
                    call.name,
                    call.id,
                    timeout,
                )
                raise ToolError(
                    f"Tool '{call.name}' timed out after {timeout:g}s and is still running in "
                    "the background (a sync tool cannot be stopped); its result will be "
                    "discarded."
                ) from None
            raise ToolError(f"Tool '{call.name}' timed out after {timeout:g}s") from None
        return self.normalize(result)

    def normalize(self, result: Any) -> str:
        return normalize_result(result, self.limits.max_result_chars)


class ToolRaisedBase(Exception):
    """A tool raised a BaseException that is not an Exception (SystemExit, KeyboardInterrupt, a
    CancelledError of its own, a library's own kind): the tool's failure (its message: the
    type's name), never the server's exit, the run's cancel nor its attempt's crash."""


async def contained(call: Awaitable[Any]) -> Any:
    """``await call`` (a tool's), inside the task that runs it: asyncio lets SystemExit and
    KeyboardInterrupt out of a task through the event loop, which would stop the server, and
    any other BaseException would end the attempt as lost (the recovered run would call the tool
    again, until its recovery limit); a CancelledError counts only when this task is being
    cancelled (the call's timeout, or the run's stop)."""
    try:
        return await call
    except asyncio.CancelledError:
        if (task := asyncio.current_task()) is not None and task.cancelling():
            raise
        raise ToolRaisedBase("CancelledError") from None
    except Exception:
        raise
    except BaseException as exc:  # noqa: BLE001 (the tool's failure, whatever it raised)
        raise ToolRaisedBase(type(exc).__name__) from None
