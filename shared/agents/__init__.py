"""Tether's agent runtime: definitions, model adapters, tools, the agent loop and its handler.

Imports only ``shared.*`` and libraries, never ``gateway`` or ``worker``.
"""

from tether.agents.adapters import (
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
from tether.agents.adapters.run import run_adapter
from tether.agents.approvals import ApprovalPolicy, denial_text, requires_approval
from tether.agents.cli import run_agent_command
from tether.agents.definitions import AgentDefinition, create_agent
from tether.agents.errors import (
    AgentError,
    DefinitionError,
    LimitExceeded,
    ModelError,
    ToolError,
)
from tether.agents.handler import build_agent_app, build_app_from_dir, parse_input
from tether.agents.loader import load_agents_dir, load_tools
from tether.agents.loop import LoopState
from tether.agents.registry import AgentRegistry
from tether.agents.runner import AgentRunResult, run_agent
from tether.agents.sse import SseEvent, read_sse
from tether.agents.tools import FunctionTool, schema_tool, tool
from tether.agents.translator import ResponsesTranslator
from tether.agents.types import (
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
    "ApprovalPolicy",
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
    "denial_text",
    "from_ai_gateway",
    "from_model_serving",
    "is_supervisor_tool",
    "load_agents_dir",
    "load_tools",
    "openai_compatible",
    "parse_input",
    "read_sse",
    "requires_approval",
    "run_adapter",
    "run_agent",
    "run_agent_command",
    "schema_tool",
    "supervisor_tools",
    "tool",
]
