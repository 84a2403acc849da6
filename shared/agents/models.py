"""Model strings → adapters.

``scripted`` (the agent's ``script``), ``supervisor:<model>``, ``gateway:<model>`` (AI Gateway chat
completions), ``openai:<model>`` (OPENAI_BASE_URL / OPENAI_API_KEY), ``serving:<endpoint>`` or a
bare endpoint name (Model Serving). None falls back to DATABRICKS_SERVING_ENDPOINT_NAME.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tether.agents.adapters.chat_completions import (
    ENDPOINT_ENV,
    from_ai_gateway,
    from_model_serving,
    openai_compatible,
)
from tether.agents.adapters.scripted import ScriptedModel
from tether.agents.adapters.supervisor import SupervisorAdapter
from tether.agents.errors import DefinitionError
from tether.agents.types import ModelAdapter

if TYPE_CHECKING:
    from tether.agents.definitions import AgentDefinition


def _chat_options(agent: AgentDefinition) -> dict[str, Any]:
    options: dict[str, Any] = {"generation_params": agent.generation_params}
    if agent.max_tokens is not None:
        options["max_tokens"] = agent.max_tokens
    return options


def model_from_string(spec: str, agent: AgentDefinition) -> ModelAdapter:
    kind, sep, rest = spec.partition(":")
    if spec == "scripted":
        if not agent.script:
            raise DefinitionError(f"{agent.where}: model 'scripted' needs a 'script'")
        return ScriptedModel(list(agent.script))
    if sep and kind == "supervisor":
        return SupervisorAdapter(rest)
    if sep and kind == "gateway":
        return from_ai_gateway(rest, **_chat_options(agent))
    if sep and kind == "openai":
        return openai_compatible(rest, **_chat_options(agent))
    endpoint = rest if sep and kind == "serving" else spec
    return from_model_serving(endpoint, **_chat_options(agent))


def resolve_model(agent: AgentDefinition, default: ModelAdapter | str | None) -> ModelAdapter:
    model = agent.model if agent.model is not None else default
    if model is None and agent.script:
        model = "scripted"
    if model is None:
        endpoint = os.environ.get(ENDPOINT_ENV)
        if not endpoint:
            raise DefinitionError(
                f"Agent '{agent.name}' has no model configured: set 'model' or {ENDPOINT_ENV}"
            )
        model = endpoint
    if isinstance(model, str):
        return model_from_string(model, agent)
    return model
