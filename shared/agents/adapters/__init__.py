"""Model adapters: chat completions (Databricks, AI Gateway, OpenAI-compatible), the Supervisor
API with hosted tools, and a scripted model."""

from tether.agents.adapters import hosted as supervisor_tools
from tether.agents.adapters.chat_completions import (
    ChatCompletionsAdapter,
    from_ai_gateway,
    from_model_serving,
    openai_compatible,
)
from tether.agents.adapters.hosted import HostedTool, is_supervisor_tool
from tether.agents.adapters.http import BearerAuth, DatabricksAuth
from tether.agents.adapters.scripted import ScriptedModel, ScriptedTurn
from tether.agents.adapters.supervisor import SupervisorAdapter

__all__ = [
    "BearerAuth",
    "ChatCompletionsAdapter",
    "DatabricksAuth",
    "HostedTool",
    "ScriptedModel",
    "ScriptedTurn",
    "SupervisorAdapter",
    "from_ai_gateway",
    "from_model_serving",
    "is_supervisor_tool",
    "openai_compatible",
    "supervisor_tools",
]
