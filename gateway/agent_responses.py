"""A completed ``/api/agents/invocations`` run as an OpenAI Responses object, built from the
run's stored events through the same translator as the stream (so the two never disagree)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tether.agent_surface import AgentsSurface
from tether.gateway.agent_models import ResponsesResponse, ToolErrorView
from tether.gateway.agent_stream import translate
from tether.gateway.keys import SERVICES
from tether.gateway.responses import json_response
from tether.store.schema import Invocation

PAGE = 1000


async def responses_answer(
    request: web.Request, agents: AgentsSurface, invocation: Invocation, created_at: int
) -> web.Response:
    store = request.app[SERVICES].store
    translator = agents.translator(invocation.id)
    output: list[dict[str, Any]] = []
    tools: dict[str, str] = {}
    errors: list[ToolErrorView] = []
    after = 0
    while True:
        page = await store.events_after(invocation.id, after, PAGE)
        for event in page:
            data = event.data if isinstance(event.data, dict) else {}
            if event.type == "tool_call":
                tools[str(data.get("callId"))] = str(data.get("name"))
            elif event.type == "tool_result" and data.get("error"):
                tool = tools.get(str(data.get("callId")), "")
                errors.append(ToolErrorView(tool=tool, error=str(data["error"])))
            for item in translate(translator, event):
                if item.get("type") == "response.output_item.done":
                    output.append(item["item"])
        if len(page) < PAGE:
            break
        after = page[-1].cursor
    answer = ResponsesResponse(
        id=f"resp_{invocation.id.replace('-', '')}",
        created_at=created_at,
        thread_id=invocation.session_id or "",
        invocation_id=invocation.id,
        output=output,
        tool_errors=errors,
    )
    return json_response(answer)
