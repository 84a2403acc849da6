"""``run_adapter``: an adapter driven on its own, as the reference's ``adapter.run(input, ctx)``.

It yields ``status running``, the turns' events, ``tool_call``/``tool_result`` around each call
to ``execute_tool``, and ``status error`` (a fixed, client-safe text) when the model fails. The
server's agent loop (``shared.agents.loop``) adds limits, approvals and durable steps on top of
the same turns.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from dataclasses import replace

from tether.agents.errors import ModelError, ToolError
from tether.agents.types import (
    AgentEvent,
    AgentInput,
    ExecuteTool,
    Message,
    ModelAdapter,
    ToolCall,
    TurnOutcome,
    status,
    tool_call_event,
    tool_result_event,
)
from tether.jsonvalue import dumps

log = logging.getLogger(__name__)


async def _call(call: ToolCall, execute_tool: ExecuteTool) -> tuple[AgentEvent, Message]:
    try:
        result = await execute_tool(call.name, call.args)
    except ToolError as exc:
        error = str(exc)
    except Exception as exc:
        log.warning("tool '%s' raised %s", call.name, type(exc).__name__)
        error = f"Tool '{call.name}' failed."
    else:
        content = result if isinstance(result, str) else dumps(result)
        return tool_result_event(call.id, result), Message("tool", content, call.id)
    return (
        tool_result_event(call.id, None, error),
        Message("tool", dumps({"error": error}), call.id),
    )


async def run_adapter(
    adapter: ModelAdapter,
    request: AgentInput,
    execute_tool: ExecuteTool,
    *,
    max_steps: int = 10,
    raise_errors: bool = False,
) -> AsyncGenerator[AgentEvent, None]:
    """Drive ``adapter`` for up to ``max_steps`` turns, executing tool calls in order."""
    if request.signal is not None and request.signal.is_set():
        return
    yield status("running")
    messages = list(request.messages)
    for _ in range(max_steps):
        outcome: TurnOutcome | None = None
        try:
            turn = adapter.turn(replace(request, messages=list(messages)))
            async with contextlib.aclosing(turn) as items:
                async for item in items:
                    if isinstance(item, TurnOutcome):
                        outcome = item
                    else:
                        yield item
        except ModelError as exc:
            yield status("error", str(exc))
            if raise_errors:
                raise
            return
        if outcome is None or not outcome.tool_calls:
            return
        messages.append(Message("assistant", outcome.text, tool_calls=outcome.tool_calls))
        for call in outcome.tool_calls:
            yield tool_call_event(call)
            event, message = await _call(call, execute_tool)
            yield event
            messages.append(message)
