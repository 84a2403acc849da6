"""The built-in handler: an AgentApp whose invoke and recover handlers run a named agent.

Both are the same function: a first attempt, one resumed after an approval and a replacement
after a crash all run the agent from the top on the invocation's record (``ctx.step``), which
replays what earlier attempts finished and goes on from there.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tether import AgentApp, InputCheck, InputRejected, InvocationContext, RequestAuth
from tether.agents.approvals import ApprovalPolicy
from tether.agents.definitions import ON_BEHALF_OF_USER, AgentDefinition, reachable
from tether.agents.dispatch import Budget
from tether.agents.errors import AgentError, DefinitionError
from tether.agents.loader import load_agents_dir
from tether.agents.loop import AgentLoop, LoopState
from tether.agents.mcp.agent_tools import forwards_workspace_auth
from tether.agents.mcp.config import McpConfig
from tether.agents.memory import begin, forget_after_failure, remember
from tether.agents.registry import AgentRegistry
from tether.agents.run_context import RunContext
from tether.agents.skills.forcing import FORCED_SKILL, choose_skill
from tether.agents.surface import AgentsView
from tether.agents.types import Limits, Message, ModelAdapter, status

MAX_CONTENT_CHARS = 64_000
MAX_ITEMS = 100


class InvalidAgentInput(AgentError, InputRejected):
    """The invocation input is not a string, a message list or ``{agent, messages}``."""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["user", "assistant"] = "user"
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)


class AgentRequest(BaseModel):
    """A normalized invocation input. System messages are refused: the agent owns its prompt."""

    model_config = ConfigDict(extra="forbid")

    agent: str | None = None
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_ITEMS)
    skill: str | None = Field(None, pattern=FORCED_SKILL.pattern)
    approvals: Literal["ask", "deny"] = "ask"
    """``deny``: gated tool calls are denied at once, never waited for (a run nobody watches)."""


def parse_input(value: Any) -> AgentRequest:
    """Accept ``"text"``, ``[{role, content}, …]`` or ``{"agent": …, "messages": …}``."""
    if isinstance(value, str):
        value = {"messages": [{"role": "user", "content": value}]}
    elif isinstance(value, list):
        value = {"messages": value}
    elif isinstance(value, dict) and isinstance(value.get("messages"), str):
        value = {**value, "messages": [{"role": "user", "content": value["messages"]}]}
    try:
        return AgentRequest.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise InvalidAgentInput(f"invalid agent input: {problems}") from None


def check_input(registry: AgentRegistry, value: Any) -> InputCheck:
    """The gateway's check before it accepts ``value``: a well-formed request for a registered
    agent, and whether that agent runs on the caller's credentials. Raises
    :class:`InvalidAgentInput` (an ``InputRejected``: a 422 with the reason)."""
    request = parse_input(value)
    try:
        agent = registry.get(request.agent)
    except DefinitionError as exc:
        raise InvalidAgentInput(str(exc)) from None
    as_user = _on_behalf_of_user(agent)
    if as_user:  # the agent or a sub-agent it may call runs as the caller
        return InputCheck(
            "required", resumes_without_user=all(a.resume_without_user for a in as_user)
        )
    if forwards_workspace_auth(registry.mcp, agent):  # MCP calls go as the caller when they can
        return InputCheck("optional", resumes_without_user=True)
    return InputCheck("none")


def _on_behalf_of_user(agent: AgentDefinition) -> list[AgentDefinition]:
    """The agents of a run of ``agent`` (itself and every sub-agent it reaches) that run on
    the caller's credentials: a sub-agent declared so needs them as much as a top-level one."""
    return [a for a in reachable([agent]) if a.auth == ON_BEHALF_OF_USER]


def _result(state: LoopState, start: int) -> dict[str, Any]:
    """The answer: the agent, its text and this invocation's messages (never the system prompt,
    nor the earlier turns of its thread)."""
    return {
        "agent": state.agent,
        "text": state.text,
        "messages": [m.to_json() for m in state.messages[start:]],
    }


def _user_headers(auth: RequestAuth) -> Any:
    async def headers() -> dict[str, str]:
        def authenticate() -> dict[str, str]:
            return dict(auth.client_for("user").config.authenticate())

        return await asyncio.to_thread(authenticate)

    return headers


async def run_invocation(registry: AgentRegistry, value: Any, ctx: InvocationContext) -> Any:
    """Run (or resume) one invocation; returns ``{"agent", "text", "messages"}``."""
    request = parse_input(value)
    agent = registry.get(request.agent)
    auth = ctx.request_auth if _on_behalf_of_user(agent) else None
    run = RunContext(
        emit=ctx.emit,
        model_for=registry.model_for,
        limits=registry.limits,
        max_event_bytes=ctx.max_event_bytes,
        budget=Budget(registry.limits.max_tool_calls),
        thread_id=ctx.invocation_id,
        steps=ctx,
        approval=registry.approval
        if request.approvals == "ask"
        else dataclasses.replace(registry.approval, ask=False),
        attempt=ctx.attempt,
        request_auth=auth,
        model_headers=_user_headers(auth) if auth is not None and auth.has_user else None,
        mcp=registry.mcp,
        mcp_auth=ctx.request_auth,
        meter=ctx,
    )
    loop = AgentLoop(agent, run)
    asked = [Message(m.role, m.content) for m in request.messages]
    skill, asked = choose_skill(agent.skills, request.skill, asked)
    earlier = await begin(ctx, agent, asked)
    await ctx.emit(status("running"))  # not stored again by an attempt that replays
    try:
        final = await loop.run(loop.start([*earlier, *asked], skill=skill))
    except Exception:  # not a park (Suspend) or a cancel: those are BaseExceptions
        await forget_after_failure(ctx, agent)
        raise
    await remember(ctx, agent, asked, final.text)  # before "complete", as the reference does
    await ctx.emit(status("complete"))
    return _result(final, 1 + len(earlier))


def build_agent_app(registry: AgentRegistry, *, name: str = "tether-agents") -> AgentApp:
    """An AgentApp running ``registry``'s agents; the same handler resumes recovered attempts."""
    app = AgentApp(name=name)

    async def handle(value: Any, ctx: InvocationContext) -> Any:
        return await run_invocation(registry, value, ctx)

    app.invoke(handle)
    app.recover(handle)
    app.input_checker = lambda value: check_input(registry, value)
    app.startup_checks.append(registry.preflight)
    app.settings_hooks.append(registry.apply_settings)
    app.agents = AgentsView(registry, parse_input)
    app.on_shutdown(registry.aclose)  # the MCP connections
    return app


def build_app_from_dir(
    agents_dir: str | Path,
    *,
    tools: str | Path | ModuleType | Mapping[str, Any] | None = None,
    code_agents: Sequence[AgentDefinition] = (),
    default_agent: str | None = None,
    default_model: ModelAdapter | str | None = None,
    limits: Limits | None = None,
    approval: ApprovalPolicy | None = None,
    name: str = "tether-agents",
    skills_dir: str | Path | None = None,
    auto_inherit_skills: bool = False,
    mcp: McpConfig | None = None,
) -> AgentApp:
    """``build_agent_app(load_agents_dir(...))``: tools default to ``<agents_dir>/tools.py``."""
    registry = load_agents_dir(
        agents_dir,
        tools=tools,
        code_agents=code_agents,
        default_agent=default_agent,
        default_model=default_model,
        limits=limits,
        approval=approval,
        skills_dir=skills_dir,
        auto_inherit_skills=auto_inherit_skills,
        mcp=mcp,
    )
    return build_agent_app(registry, name=name)
