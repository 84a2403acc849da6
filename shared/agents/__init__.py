"""Tether's agent runtime: definitions, model adapters, tools, the agent loop and its handler.

Imports only ``shared.*`` and libraries, never ``gateway`` or ``worker``.
"""

from shared.agents.adapters import (
    BearerAuth,
    ChatCompletionsAdapter,
    DatabricksAuth,
    HostedTool,
    ScriptedModel,
    ScriptedTurn,
    SupervisorAdapter,
    from_ai_gateway,
    from_model_serving,
    is_supervisor_tool,
    openai_compatible,
    supervisor_tools,
)
from shared.agents.adapters.run import run_adapter
from shared.agents.cli import run_agent_command
from shared.agents.definitions import AgentDefinition, create_agent
from shared.agents.errors import (
    AgentError,
    DefinitionError,
    LimitExceeded,
    ModelError,
    ToolError,
)
from shared.agents.handler import build_agent_app, build_app_from_dir, parse_input
from shared.agents.loader import load_agents_dir, load_tools
from shared.agents.loop import LoopState
from shared.agents.registry import AgentRegistry
from shared.agents.runner import AgentRunResult, run_agent
from shared.agents.sse import SseEvent, read_sse
from shared.agents.tools import FunctionTool, schema_tool, tool
from shared.agents.translator import ResponsesTranslator
from shared.agents.types import (
    AgentInput,
    Limits,
    Message,
    ModelAdapter,
    ToolCall,
    ToolDefinition,
    TurnOutcome,
)

__all__ = [
    "AgentDefinition",
    "AgentError",
    "AgentInput",
    "AgentRegistry",
    "AgentRunResult",
    "BearerAuth",
    "ChatCompletionsAdapter",
    "DatabricksAuth",
    "DefinitionError",
    "FunctionTool",
    "HostedTool",
    "LimitExceeded",
    "Limits",
    "LoopState",
    "Message",
    "ModelAdapter",
    "ModelError",
    "ResponsesTranslator",
    "ScriptedModel",
    "ScriptedTurn",
    "SseEvent",
    "SupervisorAdapter",
    "ToolCall",
    "ToolDefinition",
    "ToolError",
    "TurnOutcome",
    "build_agent_app",
    "build_app_from_dir",
    "create_agent",
    "from_ai_gateway",
    "from_model_serving",
    "is_supervisor_tool",
    "load_agents_dir",
    "load_tools",
    "openai_compatible",
    "parse_input",
    "read_sse",
    "run_adapter",
    "run_agent",
    "run_agent_command",
    "schema_tool",
    "supervisor_tools",
    "tool",
]
