"""Bodies of the ``/api/agents/*`` routes (AppKit's agents plugin, spec §4.8), as pydantic models.

Request bodies ignore unknown keys, as AppKit's schemas strip them; errors use Tether's one error
shape (a 422 names the field), not AppKit's ``{"error": "Invalid request", "details"}``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    TypeAdapter,
)

from tether.gateway.models import STRICT, Timestamp, storable_text

MAX_MESSAGE_CHARS = 64_000
MAX_ITEMS = 100
LENIENT = ConfigDict(extra="ignore")
# a length before the validator, or pydantic calls a string too long one of "items"
Text = Annotated[StrictStr, AfterValidator(storable_text)]
MessageText = Annotated[
    StrictStr, Field(max_length=MAX_MESSAGE_CHARS), AfterValidator(storable_text)
]
AskedText = Annotated[
    StrictStr, Field(min_length=1, max_length=MAX_MESSAGE_CHARS), AfterValidator(storable_text)
]
AgentName = Annotated[StrictStr, Field(min_length=1, max_length=64), AfterValidator(storable_text)]
SkillName = Annotated[StrictStr, Field(max_length=256), AfterValidator(storable_text)]
ThreadId = Annotated[
    StrictStr,
    Field(min_length=1, max_length=256, description="The thread: the session its turns share."),
    AfterValidator(storable_text),
]
THREAD_ID: TypeAdapter[str] = TypeAdapter(ThreadId)
"""The same rules for a thread id in a path."""


class ChatRequest(BaseModel):
    """``POST /api/agents/chat``."""

    model_config = LENIENT

    message: Text = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    threadId: ThreadId | None = None  # noqa: N815 (AppKit's wire name)
    agent: AgentName | None = Field(None, description="Default agent.")
    skill: SkillName | None = Field(
        None,
        description="A skill to force for this turn (the client's /skill-name); unknown: ignored.",
    )
    mlflowRunId: Text | None = Field(None, description="Accepted and ignored.")  # noqa: N815


class ResponsesItem(BaseModel):
    model_config = LENIENT

    role: Literal["user", "assistant", "system"] | None = None
    content: MessageText | Annotated[list[Any], Field(max_length=MAX_ITEMS)] | None = None
    type: StrictStr | None = None


class ResponsesRequest(BaseModel):
    """``POST /api/agents/invocations``: an OpenAI Responses request for the default agent."""

    model_config = LENIENT

    input: AskedText | Annotated[list[ResponsesItem], Field(min_length=1, max_length=MAX_ITEMS)]
    model: StrictStr | None = Field(None, description="Ignored: the agent chooses its model.")
    mlflowRunId: Text | None = None  # noqa: N815
    stream: StrictBool = Field(False, description="Answer with the Responses event stream.")


class ApproveRequest(BaseModel):
    """``POST /api/agents/approve``: AppKit's body; ``streamId`` is the invocation id."""

    model_config = LENIENT

    streamId: Text = Field(min_length=1, max_length=64)  # noqa: N815
    approvalId: Text = Field(min_length=1, max_length=128)  # noqa: N815
    decision: Literal["approve", "deny"]


class CancelRequest(BaseModel):
    model_config = LENIENT

    streamId: Text = Field(min_length=1, max_length=64)  # noqa: N815


class ApproveResponse(BaseModel):
    model_config = STRICT

    decision: Literal["approve", "deny"]


class CancelResponse(BaseModel):
    model_config = STRICT

    cancelled: Literal[True]


class DeletedResponse(BaseModel):
    model_config = STRICT

    deleted: Literal[True]


class ThreadMessageView(BaseModel):
    model_config = STRICT

    role: Literal["user", "assistant"]
    content: str
    createdAt: Timestamp  # noqa: N815


class ThreadView(BaseModel):
    """``GET /api/agents/threads/{id}``: the newest ``agents.max_thread_messages`` messages."""

    model_config = STRICT

    id: str
    createdAt: Timestamp  # noqa: N815
    updatedAt: Timestamp  # noqa: N815
    messages: list[ThreadMessageView]


class SkillInfo(BaseModel):
    model_config = STRICT

    name: str = Field(description="The address load_skill and /skill-name take.")
    description: str


class AgentsInfo(BaseModel):
    model_config = STRICT

    agents: list[str]
    defaultAgent: str | None  # noqa: N815
    skills: dict[str, list[SkillInfo]] = Field(
        default_factory=dict, description="Each agent that sees a skill: its skill catalog."
    )


class ToolErrorView(BaseModel):
    model_config = STRICT

    tool: str
    error: str


class ResponsesResponse(BaseModel):
    """A completed ``/api/agents/invocations`` run, as an OpenAI Responses object."""

    model_config = STRICT

    id: str = Field(description="resp_<invocation id without hyphens>")
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["completed"] = "completed"
    thread_id: str
    invocation_id: str
    output: list[dict[str, Any]]
    tool_errors: list[ToolErrorView] = Field(
        default_factory=list, description="Tool calls that ended in an error (their safe text)."
    )
