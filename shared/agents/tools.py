"""Function tools: JSON schemas from type hints or pydantic models, arguments validated first."""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from tether.agents.errors import DefinitionError, ToolError
from tether.agents.sync_tools import SYNC_TOOLS
from tether.agents.tool_context import ToolContext
from tether.agents.types import JsonSchema, ToolAnnotations, ToolDefinition, ToolEffect

TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")
EFFECTS = ("read", "write", "update", "destructive")


def wire_name(name: str) -> str:
    """A tool's name as model APIs take it: Databricks tool names allow ``[a-zA-Z0-9_-]``, so
    every ``.`` becomes ``__`` (the chat adapter's, and MCP names' check of its length)."""
    return name.replace(".", "__")


def _strip_titles(schema: JsonSchema) -> JsonSchema:
    out = {k: v for k, v in schema.items() if k != "title"}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {
            k: {kk: vv for kk, vv in v.items() if kk != "title"} if isinstance(v, dict) else v
            for k, v in out["properties"].items()
        }
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


@dataclass(frozen=True, slots=True)
class FunctionTool:
    """A Python callable the model can call. Build one with :func:`tool`."""

    name: str
    description: str
    parameters: JsonSchema
    fn: Callable[..., Any]
    validator: type[BaseModel] | None = None
    model_argument: str | None = None  # the fn takes one pydantic model argument of this name
    annotations: ToolAnnotations | None = None
    timeout_s: float | None = None
    context_argument: str | None = None  # the fn takes a ToolContext under this name

    @property
    def is_sync(self) -> bool:
        """A sync function runs on a thread, which a timeout cannot stop."""
        return not inspect.iscoroutinefunction(self.fn)

    def definition(self, name: str | None = None) -> ToolDefinition:
        return ToolDefinition(
            name or self.name, self.description, self.parameters, self.annotations
        )

    def _arguments(self, args: Any) -> dict[str, Any]:
        if not isinstance(args, dict):
            raise ToolError(
                f"Function tool '{self.name}' received non-object arguments (got {_kind(args)})"
            )
        if self.validator is None:
            missing = [k for k in self.parameters.get("required", ()) if k not in args]
            if missing:
                raise ToolError(f"Invalid arguments for tool '{self.name}': missing {missing}")
            return {"args": args}
        try:
            parsed = self.validator.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors()
            )
            raise ToolError(f"Invalid arguments for tool '{self.name}': {problems}") from None
        if self.model_argument is not None:
            return {self.model_argument: parsed}
        return {field: getattr(parsed, field) for field in type(parsed).model_fields}

    async def call(self, args: Any, context: ToolContext | None = None) -> Any:
        """Validate ``args`` and run the function (a sync one on a thread of its own:
        :mod:`tether.agents.sync_tools`)."""
        kwargs = self._arguments(args)
        if self.context_argument is not None:
            kwargs[self.context_argument] = context
        positional = [kwargs.pop("args")] if self.validator is None else []  # execute(args)
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(*positional, **kwargs)
        else:
            result = await SYNC_TOOLS.run(self.name, self.fn, *positional, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result.model_dump(mode="json") if isinstance(result, BaseModel) else result


def _context_argument(fn: Callable[..., Any]) -> str | None:
    hints = get_type_hints(fn)
    return next((name for name, hint in hints.items() if hint is ToolContext), None)


def _validator(fn: Callable[..., Any]) -> tuple[type[BaseModel], str | None]:
    hints = get_type_hints(fn, include_extras=True)
    context = _context_argument(fn)
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != context
    ]
    if len(params) == 1:
        hint = hints.get(params[0].name)
        if inspect.isclass(hint) and issubclass(hint, BaseModel):
            return hint, params[0].name
    fields: dict[str, Any] = {}
    for p in params:
        if p.name not in hints:
            raise DefinitionError(f"tool '{fn.__name__}': parameter '{p.name}' needs a type hint")
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (hints[p.name], default)
    model = create_model(f"{fn.__name__}_args", __config__=ConfigDict(extra="forbid"), **fields)
    return model, None


def _description(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n")[0].replace("\n", " ").strip() or f"Call {fn.__name__}"


def make_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    effect: ToolEffect | None = None,
    timeout_s: float | None = None,
) -> FunctionTool:
    tool_name = name or fn.__name__
    if not TOOL_NAME.match(tool_name):
        raise DefinitionError(f"tool name {tool_name!r} must match {TOOL_NAME.pattern}")
    if effect is not None and effect not in EFFECTS:
        raise DefinitionError(f"tool '{tool_name}': effect must be one of {', '.join(EFFECTS)}")
    validator, model_argument = _validator(fn)
    schema = _strip_titles(validator.model_json_schema())
    return FunctionTool(
        tool_name,
        description or _description(fn),
        schema,
        fn,
        validator,
        model_argument,
        ToolAnnotations(effect=effect) if effect else None,
        timeout_s,
        _context_argument(fn),
    )


def schema_tool(
    name: str,
    description: str,
    parameters: JsonSchema,
    execute: Callable[[dict[str, Any]], Awaitable[Any] | Any],
    *,
    effect: ToolEffect | None = None,
    timeout_s: float | None = None,
) -> FunctionTool:
    """A tool with a hand-written JSON schema; ``execute`` receives the argument object."""
    if not TOOL_NAME.match(name):
        raise DefinitionError(f"tool name {name!r} must match {TOOL_NAME.pattern}")
    return FunctionTool(
        name,
        description,
        dict(parameters),
        execute,
        None,
        None,
        ToolAnnotations(effect=effect) if effect else None,
        timeout_s,
    )


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    effect: ToolEffect | None = None,
    timeout_s: float | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effect: ToolEffect | None = None,
    timeout_s: float | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a typed function into a tool: ``@tool`` or ``@tool(effect="write", timeout_s=30)``.

    The schema comes from the type hints (``Annotated[str, Field(description=...)]`` works) or
    from a single pydantic-model parameter; the docstring's first paragraph is the description.
    """

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return make_tool(f, name=name, description=description, effect=effect, timeout_s=timeout_s)

    return wrap(fn) if fn is not None else wrap


def tools_from(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """Every tool in a module namespace (FunctionTool or hosted tool), keyed by tool name.

    A module may instead define ``TOOLS = {key: tool}`` to choose the keys itself.
    """
    from tether.agents.adapters.hosted import HostedTool

    explicit = namespace.get("TOOLS")
    if isinstance(explicit, Mapping):
        return dict(explicit)
    found: dict[str, Any] = {}
    for attr, value in namespace.items():
        if isinstance(value, FunctionTool):
            found[value.name] = value
        elif isinstance(value, HostedTool) and not attr.startswith("_"):
            found[attr] = value
    return found
