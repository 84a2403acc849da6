"""The ``agents`` settings: the built-in agent runtime's limits and defaults.

Part of the one settings object (:mod:`tether.settings`, which re-exports it); kept apart, as
the ``auth`` section is (:mod:`tether.auth_settings`), so that no settings module grows past a
screenful of sections.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from tether.env_lists import listed
from tether.settings_section import DAY, SettingsSection


class AgentSettings(SettingsSection):
    """The built-in agent runtime's limits and defaults (``tether.agents``). They apply to an
    agent app whose registry was built without explicit ``Limits`` (``tether dev --agents``,
    ``build_app_from_dir(dir)``); limits given in code win."""

    max_tool_calls: int = Field(50, ge=1, description="Tool calls per run, sub-agents included.")
    max_sub_agent_depth: int = Field(3, ge=0, description="How deep sub-agents may nest.")
    tool_call_timeout: float = Field(
        300.0,
        gt=0,
        le=DAY,
        description="Seconds a tool call may take unless the tool sets its own.",
    )
    max_steps: int = Field(
        10, ge=1, description="Model turns per agent run unless the agent sets maxSteps."
    )
    max_result_chars: int = Field(
        50_000, ge=1, description="A tool result longer than this is cut, with a marker."
    )
    max_tool_argument_bytes: int = Field(
        256 * 1024,
        ge=1,
        description=(
            "JSON bytes of one tool call's arguments; larger calls are refused with an error "
            "the model reads, and so is a call whose tool_call event would outgrow "
            "limits.max_event_bytes."
        ),
    )
    default_model: str | None = Field(
        None,
        description=(
            "Model string for agents that name none (else DATABRICKS_SERVING_ENDPOINT_NAME)."
        ),
    )
    max_thread_messages: int = Field(
        200,
        ge=2,
        description=(
            "Messages kept per agent thread (a session's conversation), trimmed oldest-first; "
            "also how many earlier turns an agent is shown."
        ),
    )

    skills_dir: str | None = Field(
        None,
        description=(
            "tether dev --agents DIR (also --skills): a folder of shared skills "
            "(<name>/SKILL.md) besides DIR/skills; agents opt in with `skills:`."
        ),
    )
    mcp_trusted_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "tether dev --agents: host names of MCP servers agents may reach over https besides "
            "the workspace host and loopback (never sent credentials); comma-separated or JSON in "
            "the environment."
        ),
    )

    @field_validator("mcp_trusted_hosts", mode="before")
    @classmethod
    def comma_separated(cls, value: Any) -> Any:
        return listed(value)
